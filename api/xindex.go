package api

import (
	"bytes"
	"errors"
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
func hostQuery(c echo.Context) (index.HostQuery, error) {
	q := index.HostQuery{Q: c.QueryParam("q"), Sort: c.QueryParam("sort")}
	var err error
	if q.Limit, err = queryInt(c, "limit", 50, 1, 500); err != nil {
		return q, err
	}
	if err := q.Check(); err != nil {
		var qe *index.QueryError
		if errors.As(err, &qe) {
			return q, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: qe.Field, Message: qe.Message}
		}
		return q, err
	}
	return q, nil
}

func (x *xindex) hosts(c echo.Context) error {
	q, err := hostQuery(c)
	if err != nil {
		return err
	}
	answer, err := x.reader.Search(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, answer)
}

func (x *xindex) htmlPage(c echo.Context) error {
	q, err := hostQuery(c)
	if err != nil {
		return err
	}
	if c.QueryParam("limit") == "" {
		q.Limit = 500
	}
	ctx := c.Request().Context()
	s, err := x.reader.Summary(ctx)
	if err != nil {
		return err
	}
	hosts, err := x.reader.Hosts(ctx, q.Q, q.Sort, q.Limit)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := x.page.Render(&buf, &index.PageData{Summary: s, Hosts: hosts, Q: q.Q, Sort: q.Sort, Limit: q.Limit}); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}
