package service

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// roleKey carries the caller's Role in a request's context.
type roleKey struct{}

// roleOf is the Role the API's authentication gave r (0 when none).
func roleOf(r *http.Request) Role {
	role, _ := r.Context().Value(roleKey{}).(Role)
	return role
}

// authenticate admits decision-API requests that may use the API and
// records their Role. On a trusted listener (the API's own, loopback by
// default) without configured tokens every caller is an admin; otherwise a
// caller needs "Authorization: Bearer <token>" with a configured token.
// Tokens are compared as SHA-256 digests in constant time, every
// configured one checked, so the answer's timing tells nothing of which
// token, or how much of one, matched.
func (s *Service) authenticate(trusted bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens := s.rules.Load().cfg.APITokens
		var role Role
		if trusted && len(tokens) == 0 {
			role = RoleAdmin
		} else {
			role = matchToken(tokens, r.Header.Get("Authorization"))
		}
		if role == 0 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rl"`)
			s.apiError(w, http.StatusUnauthorized, "unauthorized", "the decision API needs \"Authorization: Bearer <token>\" with a configured token")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
	})
}

// matchToken returns the role of the token in an Authorization header
// value, or 0.
func matchToken(tokens []APIToken, authz string) Role {
	scheme, tok, ok := strings.Cut(authz, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" || len(tokens) == 0 {
		return 0
	}
	sum := sha256.Sum256([]byte(tok))
	var role Role
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].SHA256[:]) == 1 {
			role = tokens[i].Role
		}
	}
	return role
}

// adminOnly serves next to admins only (403 otherwise).
func (s *Service) adminOnly(what string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.requireAdmin(w, r, what) {
			next.ServeHTTP(w, r)
		}
	})
}

// requireAdmin answers 403 and returns false unless r's caller is an admin.
func (s *Service) requireAdmin(w http.ResponseWriter, r *http.Request, what string) bool {
	if roleOf(r) == RoleAdmin {
		return true
	}
	s.apiError(w, http.StatusForbidden, "forbidden", what+" is an admin operation: this token's role is "+roleOf(r).String())
	return false
}
