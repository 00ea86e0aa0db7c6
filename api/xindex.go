package api

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/index"
)

// xindex serves the market index: /api/xindex/summary, /api/xindex/hosts
// and the /x402-index page. Free, no payment.
type xindex struct {
	reader *index.Reader
	page   *index.HTMLPage
	// publicURL is the service's base URL, without a trailing slash.
	publicURL string
}

// register mounts the index's routes on e, behind mw.
func (x *xindex) register(e *echo.Echo, mw ...echo.MiddlewareFunc) {
	e.GET("/api/xindex/summary", x.summary, mw...)
	e.GET("/api/xindex/hosts", queryJSON(hostQuery, x.reader.Search), mw...)
	e.GET("/api/xindex/changes", queryJSON(changesQuery, x.reader.Changes), mw...)
	e.GET("/api/xindex/changes.atom", x.changesAtom, mw...)
	e.GET("/api/xindex/hosts/:host", x.host, mw...)
	e.GET("/api/xindex/resources", queryJSON(resourceQuery, x.reader.Resources), mw...)
	// The official Bazaar discovery API over the whole index: the base URL
	// an official facilitator client is given is /api/xindex/bazaar.
	e.GET("/api/xindex/bazaar/discovery/resources", queryJSON(bazaarListQuery, x.reader.BazaarList), mw...)
	e.GET("/api/xindex/bazaar/discovery/search", queryJSON(bazaarSearchQuery, x.reader.BazaarSearch), mw...)
	e.GET("/x402-index", x.htmlPage, mw...)
	e.GET("/x402-index/hosts/:host", x.hostPage, mw...)
	e.GET("/x402-index/changes", x.changesPage, mw...)
}

// latestChanges reads the newest changes, as many as the request's limit
// asks within the changes feed's bounds, for the changes page and the Atom
// feed.
func (x *xindex) latestChanges(c echo.Context) ([]index.Change, error) {
	limit, err := queryInt(c, "limit", index.DefaultChangesLimit, 1, index.MaxChangesLimit)
	if err != nil {
		return nil, err
	}
	return x.reader.LatestChanges(c.Request().Context(), "", limit)
}

func (x *xindex) changesPage(c echo.Context) error {
	changes, err := x.latestChanges(c)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := x.page.RenderChanges(&buf, changes); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

// hostDetail reads the page of the host named in the path.
func (x *xindex) hostDetail(c echo.Context) (*index.HostDetail, error) {
	host := strings.ToLower(c.Param("host"))
	d, err := x.reader.HostDetail(c.Request().Context(), host)
	if errors.Is(err, index.ErrUnknownHost) {
		return nil, &Error{Status: http.StatusNotFound, Code: "not_found", Field: "host", Message: "the index has never listed " + host}
	}
	return d, err
}

func (x *xindex) host(c echo.Context) error {
	d, err := x.hostDetail(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (x *xindex) hostPage(c echo.Context) error {
	d, err := x.hostDetail(c)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := x.page.RenderHost(&buf, d, time.Now()); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

func (x *xindex) summary(c echo.Context) error {
	s, err := x.reader.Summary(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s)
}

// hostQuery reads q, sort (one of index.SortKeys, default services),
// limit, and the filters (index.HostQuery's bounds).
func hostQuery(c echo.Context) (index.HostQuery, error) {
	q := index.HostQuery{Q: c.QueryParam("q"), Sort: c.QueryParam("sort"), QuoteMatchesListing: c.QueryParam("quote_matches_listing"),
		MinVolumeUSDC: c.QueryParam("min_volume_usdc")}
	var err error
	if q.Limit, err = queryInt(c, "limit", index.DefaultHostsLimit, 1, index.MaxHostsLimit); err != nil {
		return q, err
	}
	if q.MinPayers, err = queryInt(c, "min_payers", 0, 0, math.MaxInt32); err != nil {
		return q, err
	}
	if v := c.QueryParam("max_top_payer_share"); v != "" {
		share, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return q, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: "max_top_payer_share", Message: "max_top_payer_share must be a number between 0 and 1"}
		}
		q.MaxTopPayerShare = &share
	}
	if err := q.Check(); err != nil {
		return q, queryError(err)
	}
	return q, nil
}

// queryJSON is the handler of an index document read by a query: parse
// reads the query (a refusal is its 400), read answers it as JSON.
func queryJSON[Q, A any](parse func(echo.Context) (Q, error), read func(context.Context, Q) (A, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		q, err := parse(c)
		if err != nil {
			return err
		}
		answer, err := read(c.Request().Context(), q)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, answer)
	}
}

func (x *xindex) htmlPage(c echo.Context) error {
	q, err := hostQuery(c)
	if err != nil {
		return err
	}
	if c.QueryParam("limit") == "" {
		q.Limit = index.MaxHostsLimit
	}
	ctx := c.Request().Context()
	s, err := x.reader.Summary(ctx)
	if err != nil {
		return err
	}
	hosts, err := x.reader.Find(ctx, q)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := x.page.Render(&buf, index.PageDataOf(s, hosts, q)); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

// changesQuery reads since, host and limit (index.ChangesQuery's bounds).
func changesQuery(c echo.Context) (index.ChangesQuery, error) {
	q := index.ChangesQuery{Since: c.QueryParam("since"), Host: c.QueryParam("host")}
	var err error
	if q.Limit, err = queryInt(c, "limit", index.DefaultChangesLimit, 1, index.MaxChangesLimit); err != nil {
		return q, err
	}
	if err := q.Check(); err != nil {
		return q, queryError(err)
	}
	return q, nil
}

// queryError answers a *index.QueryError as a 400 naming its field.
func queryError(err error) error {
	var qe *index.QueryError
	if errors.As(err, &qe) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: qe.Field, Message: qe.Message}
	}
	return err
}

func (x *xindex) changesAtom(c echo.Context) error {
	changes, err := x.latestChanges(c)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := index.WriteAtom(&buf, x.publicURL, x.publicURL+"/api/xindex/changes.atom", changes); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, "application/atom+xml; charset=utf-8", buf.Bytes())
}

// resourceQuery reads the resources search's parameters
// (index.ResourceQuery); tags may repeat or be comma-separated.
func resourceQuery(c echo.Context) (index.ResourceQuery, error) {
	p := c.QueryParams()
	q := index.ResourceQuery{Q: p.Get("q"), Network: p.Get("network"), Asset: p.Get("asset"), Scheme: p.Get("scheme"),
		PayTo: p.Get("pay_to"), MaxUSD: p.Get("max_usd"), Tags: p["tags"], Live: p.Get("live"), Sort: p.Get("sort"), Cursor: p.Get("cursor")}
	var err error
	if q.Limit, err = queryInt(c, "limit", index.DefaultResourcesLimit, 1, index.MaxResourcesLimit); err != nil {
		return q, err
	}
	if q.MinPayers, err = queryInt(c, "min_payers", 0, 0, math.MaxInt32); err != nil {
		return q, err
	}
	if err := q.Check(); err != nil {
		return q, queryError(err)
	}
	return q, nil
}

// bazaarListQuery reads the Bazaar list's parameters.
func bazaarListQuery(c echo.Context) (index.BazaarListQuery, error) {
	p := c.QueryParams()
	q := index.BazaarListQuery{Type: p.Get("type"), PayTo: p.Get("payTo"), Scheme: p.Get("scheme"), Network: p.Get("network"),
		Extensions: p.Get("extensions")}
	var err error
	if q.Limit, err = queryInt(c, "limit", index.DefaultBazaarLimit, 1, index.MaxBazaarLimit); err != nil {
		return q, err
	}
	if q.Offset, err = queryInt(c, "offset", 0, 0, math.MaxInt32); err != nil {
		return q, err
	}
	if err := q.Check(); err != nil {
		return q, queryError(err)
	}
	return q, nil
}

// bazaarSearchQuery reads the Bazaar search's parameters.
func bazaarSearchQuery(c echo.Context) (index.BazaarSearchQuery, error) {
	p := c.QueryParams()
	q := index.BazaarSearchQuery{Query: p.Get("query"), Type: p.Get("type"), PayTo: p.Get("payTo"), Scheme: p.Get("scheme"),
		Network: p.Get("network"), Extensions: p.Get("extensions"), Cursor: p.Get("cursor")}
	var err error
	if q.Limit, err = queryInt(c, "limit", index.DefaultBazaarLimit, 1, index.MaxBazaarLimit); err != nil {
		return q, err
	}
	if err := q.Check(); err != nil {
		return q, queryError(err)
	}
	return q, nil
}
