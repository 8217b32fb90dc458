// Package redact removes secrets from connection strings and URLs before
// they reach a log line, an error message or an API answer, and digests
// the keys that log lines name (a key may be an API key).
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

// String returns s with its secrets replaced by Mask. s may be a URL
// (scheme://user:password@host/...?password=...), whose userinfo password
// and secret query parameters are masked, or a keyword/value connection
// string (host=db password='s e c r e t'), whose secret values are masked,
// quoted or not. A parameter is secret when its name holds pass, pwd,
// token, secret, key, auth, sig, credential or cookie (password,
// sslpassword, access_token, client_secret, api_key, X-Amz-Signature), and
// libpq's options is when it mentions one ("-c password=..."). A
// string with a scheme that does not parse as a URL is replaced whole, so
// nothing of it can leak.
func String(s string) string {
	if scheme, _, ok := strings.Cut(s, "://"); ok && !strings.ContainsAny(scheme, " =") {
		u, err := url.Parse(s)
		if err != nil {
			return "<unparsable URL>"
		}
		q := u.Query()
		changed := false
		for k, vs := range q {
			if isSecret(k, strings.Join(vs, " ")) {
				q.Set(k, Mask)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
		return u.String()
	}
	if !strings.Contains(s, "=") {
		return s
	}
	return keywords(s)
}

// secretWords are the parts of a parameter's name that make its value a
// secret: access_token, client_secret, X-Amz-Signature, sig, apikey, auth,
// passwd...
var secretWords = []string{"pass", "pwd", "token", "secret", "key", "auth", "sig", "credential", "cookie"}

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// isSecret reports whether the value of parameter k is a secret: k's name
// says so, or k is libpq's options (command-line options for the server,
// "-c password=..." among them) and mentions one.
func isSecret(k, v string) bool {
	if isSecretKey(k) {
		return true
	}
	return strings.EqualFold(k, "options") && isSecretKey(v)
}

// keywords masks the secret values of a libpq keyword/value string:
// key = value pairs separated by spaces, a value optionally in single
// quotes with \' and \\ escapes.
func keywords(s string) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		// Copy spaces.
		for i < len(s) && s[i] == ' ' {
			b.WriteByte(' ')
			i++
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' {
			i++
		}
		key := s[start:i]
		b.WriteString(key)
		for i < len(s) && s[i] == ' ' {
			b.WriteByte(' ')
			i++
		}
		if i >= len(s) || s[i] != '=' {
			continue
		}
		b.WriteByte('=')
		i++
		for i < len(s) && s[i] == ' ' {
			b.WriteByte(' ')
			i++
		}
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i < len(s) {
				i++
			}
		} else {
			for i < len(s) && s[i] != ' ' {
				i++
			}
		}
		if i > len(s) {
			i = len(s)
		}
		if isSecret(key, s[vstart:i]) {
			b.WriteString(Mask)
		} else {
			b.WriteString(s[vstart:i])
		}
	}
	return b.String()
}

// Digest returns the digest a log line names a key by, never the key
// itself (a key may be an API key or a session token): the first 8 bytes
// of the key's SHA-256, 16 hex digits. The same key always has the same
// digest, so one client's lines can be followed, and a known key's digest
// computed to find them (printf %s KEY | sha256sum | cut -c1-16). It hides
// a key of high entropy (an API key); a key of few possible values (an
// IPv4 address, a user ID) can be found again by trying them all.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}
