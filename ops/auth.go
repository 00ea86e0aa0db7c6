package ops

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/internal/bounded"
	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/metrics"
)

const (
	// sessionCookie holds an operator's session after the login form.
	sessionCookie = "x402d_ops"
	// csrfCookie holds the login form's anti-forgery value.
	csrfCookie = "x402d_ops_csrf"
	// loginPath is the login form.
	loginPath = "/ops/login"
)

// MinTokenBytes is the length of the shortest operator token (OPS_TOKEN)
// accepted, in bytes: openssl rand -hex 32 gives 64.
const MinTokenBytes = 32

const (
	// failureBurst is how many wrong tokens a client address may send
	// before it is throttled.
	failureBurst = 5
	// failureRefill is how often a throttled address gets one more try.
	failureRefill = time.Minute
	// failureAddresses bounds the client addresses whose wrong tokens are
	// counted; past it those seen least recently are forgotten.
	failureAddresses = 100_000
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
	clock      clock.Clock
	origin     *http.CrossOriginProtection
	// trusted are the proxies whose X-Forwarded-Proto is believed.
	trusted []netip.Prefix
	// failures are the tokens left to each client address that sent wrong
	// ones: failureBurst, one more each failureRefill.
	failures *bounded.Map[string, tries]
	metrics  *metrics.Metrics
}

// tries is a client address's tries left as of at.
type tries struct {
	left float64
	at   time.Time
}

func newAuth(token string, ttl time.Duration, clk clock.Clock, trusted []netip.Prefix, m *metrics.Metrics) *auth {
	a := &auth{digest: sha256.Sum256([]byte(token)), ttl: ttl, clock: clock.Or(clk), origin: http.NewCrossOriginProtection(),
		trusted: trusted, failures: bounded.New[string, tries](failureAddresses), metrics: m}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("x402d ops session key"))
	a.sessionKey = mac.Sum(nil)
	return a
}

// throttled returns how long the client address addr must wait before a
// token it sends is checked: 0 unless it sent failureBurst wrong tokens
// lately.
func (a *auth) throttled(addr string) time.Duration {
	t, ok := a.failures.Get(addr)
	if !ok {
		return 0
	}
	left := a.refill(t)
	if left >= 1 {
		return 0
	}
	return time.Duration((1 - left) * float64(failureRefill))
}

// refill returns t's tries left now.
func (a *auth) refill(t tries) float64 {
	return math.Min(failureBurst, t.left+float64(a.clock.Now().Sub(t.at))/float64(failureRefill))
}

// check reports whether given, sent by the client address addr, is the
// operator token; a wrong one takes one of the address's tries.
func (a *auth) check(addr, given string) bool {
	if a.tokenOK(given) {
		return true
	}
	a.metrics.OpsAuthFailure("wrong_token")
	a.failures.Update(addr, func(t tries, ok bool) tries {
		if !ok {
			t = tries{left: failureBurst, at: a.clock.Now()}
		}
		return tries{left: a.refill(t) - 1, at: a.clock.Now()}
	})
	return false
}

// tooManyFailures answers a request bearing a token from an address that
// must wait: 429 with Retry-After, the token not checked.
func (a *auth) tooManyFailures(c echo.Context, wait time.Duration) error {
	a.metrics.OpsAuthFailure("throttled")
	secs := retryAfter(c, wait)
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusTooManyRequests, map[string]string{
		"error":   "rate_limited",
		"message": "too many wrong operator tokens from this address: try again after " + strconv.Itoa(secs) + " s",
	})
}

// retryAfter sets the Retry-After of c's answer to wait, in whole seconds
// (at least 1), and returns them.
func retryAfter(c echo.Context, wait time.Duration) int {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
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
	exp := a.clock.Now().Add(a.ttl)
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
	return a.clock.Now().Unix() < int64(binary.BigEndian.Uint64(exp))
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

// secure reports whether the request came over HTTPS, directly or through
// one of the trusted proxies that says so (X-Forwarded-Proto), for the
// cookies' Secure flag. The header of any other peer is ignored.
func (a *auth) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !strings.EqualFold(r.Header.Get(echo.HeaderXForwardedProto), "https") {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	peer = peer.Unmap()
	for _, p := range a.trusted {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

func (a *auth) setSession(c echo.Context) {
	v, exp := a.newSession()
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: v, Path: "/ops", Expires: exp, MaxAge: int(a.ttl.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: a.secure(c.Request()),
	})
}

func (a *auth) clearCookie(c echo.Context, name, path string) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: "", Path: path, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: a.secure(c.Request()),
	})
}

// require lets operators through: a valid bearer token, a valid session
// cookie, or a valid ?token= (which is traded for a session cookie and
// removed from the address at once). Anyone else gets 401, or, for a
// browser asking for a page, a redirect to the login form; never data.
// Unsafe methods from other origins are refused (403), since browsers send
// the session cookie by themselves. A client address that sent
// failureBurst wrong tokens lately gets 429, its tokens not checked, until
// it has another try.
func (a *auth) require(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		tok, isBearer := bearer(r)
		inQuery := !isBearer && r.URL.Query().Has("token") && (r.Method == http.MethodGet || r.Method == http.MethodHead)
		if isBearer || inQuery {
			if wait := a.throttled(c.RealIP()); wait > 0 {
				return a.tooManyFailures(c, wait)
			}
		}
		if isBearer {
			if a.check(c.RealIP(), tok) {
				return next(c)
			}
			return unauthorized(c)
		}
		if inQuery {
			if !a.check(c.RealIP(), r.URL.Query().Get("token")) {
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
