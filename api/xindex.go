package api

import (
	"bytes"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/index"
)

// xindex serves the market index: /api/xindex/summary, /api/xindex/hosts
// and the /x402-index page. Free, no payment.
type xindex struct {
	reader *index.Reader
	page   *index.HTMLPage
}

func (x *xindex) summary(c echo.Context) error {
	s, err := x.reader.Summary(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s)
}

// hostQuery reads q, sort (a key of index.Sorts, default services) and
// limit (1-500, default 50).
func hostQuery(c echo.Context) (q, sort string, limit int, err error) {
	sort = c.QueryParam("sort")
	if sort == "" {
		sort = "services"
	}
	if _, ok := index.Sorts[sort]; !ok {
		return "", "", 0, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: "sort",
			Message: "sort must be one of services, price, latency, host, checked"}
	}
	if limit, err = queryInt(c, "limit", 50, 1, 500); err != nil {
		return "", "", 0, err
	}
	q = c.QueryParam("q")
	if len(q) > 200 {
		return "", "", 0, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: "q", Message: "q is at most 200 characters"}
	}
	return q, sort, limit, nil
}

func (x *xindex) hosts(c echo.Context) error {
	q, sort, limit, err := hostQuery(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	hosts, err := x.reader.Hosts(ctx, q, sort, limit)
	if err != nil {
		return err
	}
	totals, err := x.reader.Totals(ctx)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"ok": true, "hosts": hosts, "summary": totals})
}

func (x *xindex) htmlPage(c echo.Context) error {
	q, sort, limit, err := hostQuery(c)
	if err != nil {
		return err
	}
	if c.QueryParam("limit") == "" {
		limit = 500
	}
	ctx := c.Request().Context()
	s, err := x.reader.Summary(ctx)
	if err != nil {
		return err
	}
	hosts, err := x.reader.Hosts(ctx, q, sort, limit)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := x.page.Render(&buf, &index.PageData{Summary: s, Hosts: hosts, Q: q, Sort: sort, Limit: limit}); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}
