package ops

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

const (
	// sessionCookie holds an operator's session after the login form.
	sessionCookie = "x402d_ops"
	// csrfCookie holds the login form's anti-forgery value.
	csrfCookie = "x402d_ops_csrf"
	// loginPath is the login form.
	loginPath = "/ops/login"
)

// auth checks operator credentials: the token itself (bearer header, login
// form, ?token=) and the session cookies derived from it.
type auth struct {
	// digest is SHA-256 of the token: candidates are hashed and the digests
	// compared in constant time, so neither the token's bytes nor its
	// length show in how long a comparison takes.
	digest [sha256.Size]byte
	// sessionKey signs session cookies; it is derived from the token, so
	// changing OPS_TOKEN ends every session.
	sessionKey []byte
	ttl        time.Duration
	now        func() time.Time
	origin     *http.CrossOriginProtection
}

func newAuth(token string, ttl time.Duration, now func() time.Time) *auth {
	a := &auth{digest: sha256.Sum256([]byte(token)), ttl: ttl, now: now, origin: http.NewCrossOriginProtection()}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("x402d ops session key"))
	a.sessionKey = mac.Sum(nil)
	return a
}

// tokenOK reports whether given is the operator token, in time independent
// of given and of the token.
func (a *auth) tokenOK(given string) bool {
	d := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(d[:], a.digest[:]) == 1
}

// newSession returns a session cookie value valid until now + ttl:
// the expiry and its HMAC.
func (a *auth) newSession() (string, time.Time) {
	exp := a.now().Add(a.ttl)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(exp.Unix()))
	return base64.RawURLEncoding.EncodeToString(b[:]) + "." + base64.RawURLEncoding.EncodeToString(a.sign(b[:])), exp
}

func (a *auth) sign(b []byte) []byte {
	mac := hmac.New(sha256.New, a.sessionKey)
	mac.Write(b)
	return mac.Sum(nil)
}

// sessionOK reports whether v is an unexpired session signed with the
// current token.
func (a *auth) sessionOK(v string) bool {
	expPart, sigPart, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	exp, err1 := base64.RawURLEncoding.DecodeString(expPart)
	sig, err2 := base64.RawURLEncoding.DecodeString(sigPart)
	if err1 != nil || err2 != nil || len(exp) != 8 {
		return false
	}
	if !hmac.Equal(sig, a.sign(exp)) {
		return false
	}
	return a.now().Unix() < int64(binary.BigEndian.Uint64(exp))
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get(echo.HeaderAuthorization)
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// secure reports whether the request came over HTTPS (directly or through a
// proxy that says so), for the cookies' Secure flag.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get(echo.HeaderXForwardedProto), "https")
}

func (a *auth) setSession(c echo.Context) {
	v, exp := a.newSession()
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: v, Path: "/ops", Expires: exp, MaxAge: int(a.ttl.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(c.Request()),
	})
}

func clearCookie(c echo.Context, name, path string) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: "", Path: path, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(c.Request()),
	})
}

// require lets operators through: a valid bearer token, a valid session
// cookie, or a valid ?token= (which is traded for a session cookie and
// removed from the address at once). Anyone else gets 401, or, for a
// browser asking for a page, a redirect to the login form; never data.
// Unsafe methods from other origins are refused (403), since browsers send
// the session cookie by themselves.
func (a *auth) require(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if tok, ok := bearer(r); ok {
			if a.tokenOK(tok) {
				return next(c)
			}
			return unauthorized(c)
		}
		if r.URL.Query().Has("token") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if !a.tokenOK(r.URL.Query().Get("token")) {
				return unauthorized(c)
			}
			a.setSession(c)
			u := *r.URL
			q := u.Query()
			q.Del("token")
			u.RawQuery = q.Encode()
			c.Response().Header().Set("Referrer-Policy", "no-referrer")
			return c.Redirect(http.StatusSeeOther, u.RequestURI())
		}
		if ck, err := r.Cookie(sessionCookie); err == nil && a.sessionOK(ck.Value) {
			if err := a.origin.Check(r); err != nil {
				return echo.NewHTTPError(http.StatusForbidden, "cross-origin request refused")
			}
			return next(c)
		}
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.Contains(r.Header.Get(echo.HeaderAccept), "text/html") {
			return c.Redirect(http.StatusSeeOther, loginPath+"?next="+url.QueryEscape(r.URL.RequestURI()))
		}
		return unauthorized(c)
	}
}

func unauthorized(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="x402d ops"`)
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusUnauthorized, map[string]string{
		"error":   "unauthorized",
		"message": "the operator token is required: Authorization: Bearer <OPS_TOKEN>, or log in at " + loginPath,
	})
}

// safeNext returns next when it is a path of the dashboard, else "/ops":
// the login form never redirects elsewhere.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) {
		return "/ops"
	}
	if u.Path != "/ops" && !strings.HasPrefix(u.Path, "/ops/") || u.Path == loginPath {
		return "/ops"
	}
	return u.RequestURI()
}

// newCSRF returns a random anti-forgery value.
func newCSRF() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// subtle32 compares two strings in constant time (for equal lengths).
func subtle32(a, b string) int {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b))
}
