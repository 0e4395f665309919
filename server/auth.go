package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Scope is a permission a token carries. Scopes do not imply one another:
// a token that must read and write lists both.
type Scope string

// The scopes.
const (
	// ScopeRead reads counter values: GET /v1/counters/{key} (cached or
	// exact) and POST /v1/counters:get.
	ScopeRead Scope = "read"
	// ScopeWrite increments: POST /v1/counters/{key}/incr.
	ScopeWrite Scope = "write"
	// ScopeAdmin clears and resizes counters, and sees where they live and
	// what the process measures: DELETE /v1/counters/{key}, GET and PUT
	// /v1/counters/{key}/shards, /v1/nodes, /v1/hotkeys, /v1/stats; and
	// /metrics.
	ScopeAdmin Scope = "admin"
	// ScopeMetrics reads /metrics and nothing else (a scraper's token).
	ScopeMetrics Scope = "metrics"
)

// Scopes lists every scope.
var Scopes = []Scope{ScopeRead, ScopeWrite, ScopeAdmin, ScopeMetrics}

// Token is one bearer token and what it may do.
type Token struct {
	// Name identifies the token in logs and error messages (never the
	// secret); empty means "token-<i>" by its position.
	Name string
	// Secret is what clients send as "Authorization: Bearer <Secret>":
	// printable ASCII without spaces.
	Secret string
	// Scopes are the permissions; at least one.
	Scopes []Scope
	// Prefixes, when set, limit the token to counters whose key starts
	// with one of them. A limited token cannot use the routes that span
	// every counter (/v1/nodes, /v1/stats), and /v1/hotkeys shows it only
	// its own keys.
	Prefixes []string
}

// principal is a checked token: what a request may do.
type principal struct {
	name     string
	scopes   []Scope
	prefixes []string
	sum      [sha256.Size]byte
}

// has reports whether p carries sc.
func (p *principal) has(sc Scope) bool { return slices.Contains(p.scopes, sc) }

// covers reports whether p may touch key. A nil principal (no tokens
// configured) covers everything.
func (p *principal) covers(key string) bool {
	if p == nil || len(p.prefixes) == 0 {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// limited reports whether p is limited to prefixes.
func (p *principal) limited() bool { return p != nil && len(p.prefixes) > 0 }

// checkTokens validates the tokens of a Config, with the single Token as
// one more that carries every scope, and returns them as principals.
func checkTokens(single string, tokens []Token) ([]*principal, error) {
	all := append([]Token(nil), tokens...)
	if single != "" {
		all = append(all, Token{Name: "token", Secret: single, Scopes: Scopes})
	}
	var out []*principal
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]bool{}
	for i, t := range all {
		name := t.Name
		if name == "" {
			name = fmt.Sprintf("token-%d", i)
		}
		bad := func(format string, args ...any) ([]*principal, error) {
			return nil, fmt.Errorf("%w: token %q: %s", ErrConfig, name, fmt.Sprintf(format, args...))
		}
		if err := validSecret(t.Secret); err != nil {
			return bad("%v", err)
		}
		if names[name] {
			return bad("the name is used twice")
		}
		names[name] = true
		if len(t.Scopes) == 0 {
			return bad("no scopes (want some of %v)", Scopes)
		}
		for _, sc := range t.Scopes {
			if !slices.Contains(Scopes, sc) {
				return bad("unknown scope %q (want some of %v)", sc, Scopes)
			}
		}
		for _, p := range t.Prefixes {
			if p == "" {
				return bad("an empty prefix (leave Prefixes out to allow every key)")
			}
		}
		sum := sha256.Sum256([]byte(t.Secret))
		if sums[sum] {
			return bad("the same secret as another token")
		}
		sums[sum] = true
		out = append(out, &principal{name: name, scopes: slices.Clone(t.Scopes), prefixes: slices.Clone(t.Prefixes), sum: sum})
	}
	return out, nil
}

// validSecret checks a token secret: 1 to 4096 bytes of printable ASCII
// without spaces.
func validSecret(s string) error {
	if s == "" || len(s) > 4096 {
		return fmt.Errorf("the secret must be 1 to 4096 bytes, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("the secret must be printable ASCII without spaces (byte %d)", i)
		}
	}
	return nil
}

// bearer returns the credentials of an "Authorization: Bearer <token>"
// header. The scheme is case-insensitive (RFC 9110 section 11.1).
func bearer(h string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimLeft(cred, " ")
	return cred, cred != "" && !strings.ContainsAny(cred, " \t")
}

// authenticate returns the principal of r's bearer token, or an error to
// answer (401). Every configured token is compared, in constant time, so
// that the time taken does not tell which one matched.
func (s *Server) authenticate(r *http.Request) (*principal, error) {
	if len(r.Header.Values("Authorization")) > 1 {
		return nil, &httpError{status: http.StatusUnauthorized, msg: "more than one Authorization header"}
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return nil, &httpError{status: http.StatusUnauthorized, msg: "missing bearer token (Authorization: Bearer <token>)"}
	}
	sum := sha256.Sum256([]byte(got))
	var found *principal
	for _, p := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], p.sum[:]) == 1 {
			found = p
		}
	}
	if found == nil {
		return nil, &httpError{status: http.StatusUnauthorized, msg: "unknown bearer token"}
	}
	return found, nil
}

// authorize checks r against rt's needs. It returns the principal (nil
// when no tokens are configured or the route is public) or the error to
// answer: 401 without a known token, 403 when the token lacks the scope or
// the counter is outside its prefixes.
func (s *Server) authorize(r *http.Request, rt route) (*principal, error) {
	if len(s.tokens) == 0 || rt.scope == "" {
		return nil, nil
	}
	if rt.scope == ScopeMetrics && s.cfg.MetricsPublic {
		return nil, nil
	}
	p, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	if !p.has(rt.scope) && !(rt.scope == ScopeMetrics && p.has(ScopeAdmin)) {
		return nil, &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("token %q lacks the %s scope", p.name, rt.scope),
			challenge: fmt.Sprintf(`Bearer realm="hotcount", error="insufficient_scope", scope=%q`, rt.scope)}
	}
	if rt.keyed && !p.covers(r.PathValue("key")) {
		return nil, outsidePrefixes(p, r.PathValue("key"))
	}
	if rt.global && p.limited() {
		return nil, &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("token %q is limited to the prefixes %q; this route spans every counter", p.name, p.prefixes)}
	}
	return p, nil
}

// outsidePrefixes is the 403 of a key outside a token's prefixes.
func outsidePrefixes(p *principal, key string) error {
	return &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("token %q is limited to the prefixes %q; the counter %q is outside them", p.name, p.prefixes, key)}
}

// principalKey is the context key of a request's principal.
type principalKey struct{}

// principalOf returns the principal of a request that passed authorize.
func principalOf(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// Protect returns h behind the server's tokens, as a route of its own
// that spans every counter: once tokens are configured, a request needs
// one with scope (ScopeAdmin serves for ScopeMetrics, and MetricsPublic
// opens ScopeMetrics) that is not limited to key prefixes; otherwise it
// gets the server's 401 or 403. A face that serves handlers of its own
// beside the server's routes (the proxy's admin port, its /metrics) puts
// them behind the same tokens with it.
func (s *Server) Protect(scope Scope, h http.Handler) http.Handler {
	rt := route{pattern: "protected", scope: scope, global: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r, rt); err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// CheckTokens reports whether New would accept the single token and the
// tokens; the error wraps ErrConfig and names the token. Configuration
// loaders call it before they build a Client.
func CheckTokens(token string, tokens []Token) error {
	_, err := checkTokens(token, tokens)
	return err
}
