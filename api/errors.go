package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/store"
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

// errorHandler writes every error as JSON. Unknown errors are logged and
// answered as a 500 that reveals nothing of them.
func errorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var apiErr *Error
		var httpErr *echo.HTTPError
		switch {
		case errors.As(err, &apiErr):
		case errors.As(err, &httpErr):
			msg := http.StatusText(httpErr.Code)
			if m, ok := httpErr.Message.(string); ok && httpErr.Code < 500 {
				msg = m
			}
			if httpErr.Code == http.StatusRequestEntityTooLarge {
				msg = "request body is larger than the limit"
			}
			apiErr = &Error{Status: httpErr.Code, Code: codeForStatus(httpErr.Code), Message: msg}
			if httpErr.Code >= 500 {
				logger.ErrorContext(c.Request().Context(), "request failed", "error", err, "path", c.Path())
			}
		case store.IsUnavailable(err):
			// The database went away (a restart): nothing was charged by
			// this attempt, and a paid request sent again with the same
			// payment header gets its call's answer.
			logger.WarnContext(c.Request().Context(), "request failed: database unavailable", "error", err, "path", c.Path())
			c.Response().Header().Set("Retry-After", "1")
			apiErr = &Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
				Message: "the service cannot reach its database now; try again (a paid request with the same payment header gets its result, never a second charge)"}
		default:
			logger.ErrorContext(c.Request().Context(), "request failed", "error", err, "path", c.Path())
			apiErr = &Error{Status: http.StatusInternalServerError, Code: "internal_error", Message: "internal error"}
		}
		if apiErr.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(apiErr.RetryAfter))
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(apiErr.Status)
			return
		}
		_ = c.JSON(apiErr.Status, apiErr)
	}
}
