package pipeline

import (
	"errors"
	"strings"
)

// Paths and hosts are put in one canonical form before a proxied request is
// matched to a rule, so that no spelling of a path reaches the upstream as
// one resource while it was matched (or not matched) as another:
//
//   - Percent-encoded unreserved characters (RFC 3986 §2.3: letters, digits,
//     "-", ".", "_", "~") are decoded ("%2e" is "."); every other
//     percent-encoding is kept, its hex digits in upper case.
//   - Dot segments are removed (RFC 3986 §5.2.4), and repeated slashes
//     collapsed: "/x/../admin", "/./admin" and "//admin" are "/admin".
//   - A ";" starts a segment's parameters (RFC 3986 §3.3), which end at the
//     next "/". A segment's name is the part before its ";": a segment
//     named "." or ".." is a dot segment whatever its parameters ("..;x" is
//     ".."), and one with an empty name is an empty segment. Parameters of
//     other segments are kept in the forwarded path but are not part of the
//     path a rule's endpoint is matched against, so "/admin;x" is matched as
//     "/admin". An encoded "%3B" is data, not a delimiter.
//   - Matching is case-insensitive (ASCII): "/ADMIN" is matched as "/admin",
//     so an upstream that ignores case cannot be reached around a rule; the
//     forwarded path keeps the client's case.
//
// What cannot be cleaned safely is refused (the proxy answers 400): an
// encoded "/" or "\" (%2F, %5C) or a raw "\", which upstreams disagree on;
// a NUL or other control byte, encoded or not; an encoded percent followed
// by two hex digits ("%2561", a double encoding); a ".." above the root
// ("/../outside", which would leave the upstream's base path); a path not
// starting with "/".
//
// Hosts: see CanonicalHost.

// PathError is a request path the pipeline refuses to clean (400).
type PathError struct{ reason string }

func (e *PathError) Error() string { return "invalid request path: " + e.reason }

// The paths refused.
var (
	ErrPathRelative    = &PathError{"it does not start with \"/\""}
	ErrPathSlash       = &PathError{"an encoded \"/\" or \"\\\" (%2F, %5C), or a raw \"\\\""}
	ErrPathControl     = &PathError{"a NUL or control byte"}
	ErrPathDouble      = &PathError{"a double percent-encoding (%25 and two hex digits)"}
	ErrPathEscape      = &PathError{"\"..\" above the root"}
	ErrPathBadEncoding = &PathError{"a \"%\" not followed by two hex digits"}
)

// IsPathError reports whether err is a path CanonicalPath refused.
func IsPathError(err error) bool {
	var e *PathError
	return errors.As(err, &e)
}

// CanonicalPath returns the canonical form of an escaped request path (as
// url.URL.EscapedPath gives it, or a proxy's :path without its query), or
// a *PathError. The result starts with "/", holds no "//", "/./" or "/../"
// (nor ends in "/." or "/.."), and is its own canonical form.
func CanonicalPath(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", ErrPathRelative
	}
	// Decode unreserved characters and check every byte.
	var b []byte // nil while p needs no change
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", ErrPathBadEncoding
			}
			v := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case v == '/' || v == '\\':
				return "", ErrPathSlash
			case v < 0x20 || v == 0x7f:
				return "", ErrPathControl
			}
			if b == nil {
				b = append(make([]byte, 0, len(p)), p[:i]...)
			}
			if isUnreserved(v) {
				b = append(b, v)
			} else {
				b = append(b, '%', upperHex[v>>4], upperHex[v&15])
			}
			i += 2
			continue
		case c == '\\':
			return "", ErrPathSlash
		case c < 0x20 || c == 0x7f:
			return "", ErrPathControl
		case !isPathByte(c):
			// Not valid unencoded in a path (EscapedPath never gives
			// one): encode it.
			if b == nil {
				b = append(make([]byte, 0, len(p)+2), p[:i]...)
			}
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
			continue
		}
		if b != nil {
			b = append(b, c)
		}
	}
	if b != nil {
		p = string(b)
		// Checked after decoding, so that "%25%41%41" is refused too.
		for i := 0; i+4 < len(p); i++ {
			if p[i] == '%' && p[i+1] == '2' && p[i+2] == '5' && isHex(p[i+3]) && isHex(p[i+4]) {
				return "", ErrPathDouble
			}
		}
	}
	// Remove dot and empty segments. The fast path: nothing to remove.
	if !needsSegments(p) {
		return p, nil
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		name := s
		if j := strings.IndexByte(s, ';'); j >= 0 {
			name = s[:j]
		}
		switch name {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) == 0 {
				return "", ErrPathEscape
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		case "":
			if last {
				out = append(out, s) // a trailing slash (with its parameters)
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/"), nil
}

// needsSegments reports whether p (starting with "/") has a segment to
// remove: an empty one before the last, or one named "." or "..".
func needsSegments(p string) bool {
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		s := p[start:i]
		if j := strings.IndexByte(s, ';'); j >= 0 {
			s = s[:j]
		}
		if s == "." || s == ".." || (s == "" && i < len(p)) {
			return true
		}
		start = i + 1
	}
	return false
}

// MatchPath is the form of a canonical path that rules' endpoints are
// matched against (and key_by: path keys by): segment parameters removed,
// ASCII lower case.
func MatchPath(p string) string {
	if strings.IndexByte(p, ';') >= 0 {
		var b strings.Builder
		b.Grow(len(p))
		for i := 0; i < len(p); i++ {
			if p[i] == ';' {
				for i+1 < len(p) && p[i+1] != '/' {
					i++
				}
				continue
			}
			b.WriteByte(p[i])
		}
		p = b.String()
	}
	return lowerASCII(p)
}

// lowerASCII lower-cases ASCII letters only (no Unicode case folding: non-
// ASCII bytes in paths are percent-encoded).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

const upperHex = "0123456789ABCDEF"

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// isUnreserved reports RFC 3986's unreserved characters.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isPathByte reports the bytes a path may hold unencoded: unreserved, the
// sub-delimiters, ":", "@", "/" (RFC 3986 pchar), and "[" and "]", which
// url.URL.EscapedPath leaves alone. "%" is handled by the caller.
func isPathByte(c byte) bool {
	if isUnreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/', '[', ']':
		return true
	}
	return false
}
