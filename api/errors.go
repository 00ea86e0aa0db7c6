package api

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// Error is an error answered as JSON {error, message, ...}. Code is a stable
// snake_case identifier clients can switch on.
type Error struct {
	// Status is the HTTP status.
	Status int `json:"-"`
	// Code is the stable error code.
	Code string `json:"error"`
	// Message says what is wrong, for a person.
	Message string `json:"message"`
	// Field names the offending input field, if any.
	Field string `json:"field,omitempty"`
	// CallID is the paid call concerned, if any.
	CallID string `json:"call_id,omitempty"`
	// RetryAfter, when set, is the Retry-After header answered: seconds
	// until the request may be made again.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// statusCodes maps echo's own errors (routing, body limit) to stable codes.
func codeForStatus(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusBadRequest:
		return "invalid_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusRequestTimeout:
		return "timeout"
	default:
		if status >= 500 {
			return "internal_error"
		}
		return "error"
	}
}

// errorHandler writes every error as JSON, mapped by errorFor. A 402 is
// never stored by caches, as every quote.
func errorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		apiErr := errorFor(c.Request().Context(), logger, err, "path", c.Path())
		h := c.Response().Header()
		if apiErr.RetryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(apiErr.RetryAfter))
		}
		if apiErr.Status == http.StatusPaymentRequired {
			h[headerCacheControl] = noStore
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(apiErr.Status)
			return
		}
		_ = c.JSON(apiErr.Status, apiErr)
	}
}
