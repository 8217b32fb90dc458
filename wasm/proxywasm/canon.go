package main

import "strings"

// Paths are matched in one canonical form, the one rl-wasm-host's proxy
// matches (service/canon.go), so that no spelling of a path reaches the
// upstream as one resource while it was matched as another. Envoy forwards
// the path as it came (unless the connection manager normalizes it); the
// filter only matches and keys on the canonical form:
//
//   - percent-encoded unreserved characters are decoded ("%2e" is "."),
//     other encodings kept (hex in upper case);
//   - dot segments removed and repeated slashes collapsed ("/x/../admin",
//     "/./admin" and "//admin" are "/admin"); a segment named "." or ".."
//     before its ";" parameters is a dot segment;
//   - segment parameters (";x" up to the next "/") are not matched;
//   - matching is ASCII case-insensitive.
//
// Refused (400): an encoded "/" or "\" or a raw "\"; a control byte,
// encoded or not; a double encoding ("%25" and two hex digits, after
// decoding); ".." above the root; a "%" without two hex digits; a path not
// starting with "/".

// errPath is a path the filter refuses to match.
type errPath struct{ reason string }

func (e *errPath) Error() string { return "invalid request path: " + e.reason }

var (
	errPathRelative    = &errPath{"it does not start with \"/\""}
	errPathSlash       = &errPath{"an encoded \"/\" or \"\\\" (%2F, %5C), or a raw \"\\\""}
	errPathControl     = &errPath{"a NUL or control byte"}
	errPathDouble      = &errPath{"a double percent-encoding (%25 and two hex digits)"}
	errPathEscape      = &errPath{"\"..\" above the root"}
	errPathBadEncoding = &errPath{"a \"%\" not followed by two hex digits"}
)

// matchPath returns the form of a request path (its query dropped) that
// rules are matched and keyed against: canonical, parameters removed, ASCII
// lower case.
func matchPath(p string) (string, error) {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' {
		return "", errPathRelative
	}
	if plainPath(p) {
		return p, nil
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", errPathBadEncoding
			}
			v := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case v == '/' || v == '\\':
				return "", errPathSlash
			case v < 0x20 || v == 0x7f:
				return "", errPathControl
			}
			if isUnreserved(v) {
				b = append(b, v)
			} else {
				b = append(b, '%', upperHex[v>>4], upperHex[v&15])
			}
			i += 2
		case c == '\\':
			return "", errPathSlash
		case c < 0x20 || c == 0x7f:
			return "", errPathControl
		case c >= 0x80 || c == ' ' || c == '"' || c == '<' || c == '>' || c == '^' || c == '`' || c == '{' || c == '|' || c == '}':
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		default:
			b = append(b, c)
		}
	}
	for i := 0; i+4 < len(b); i++ {
		if b[i] == '%' && b[i+1] == '2' && b[i+2] == '5' && isHex(b[i+3]) && isHex(b[i+4]) {
			return "", errPathDouble
		}
	}
	segs := strings.Split(string(b[1:]), "/")
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
				return "", errPathEscape
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		case "":
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, name) // parameters are not matched
		}
	}
	return lowerASCII("/" + strings.Join(out, "/")), nil
}

// lowerASCII lower-cases ASCII letters only.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
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

// plainPath reports whether p (starting with "/") is already in the form
// matchPath returns: lower-case unreserved characters, sub-delimiters other
// than ";", ":", "@" and single slashes, with no dot segment. Most paths
// are, and skip the work.
func plainPath(p string) bool {
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
				continue
			case c == '/':
			case strings.IndexByte("-._~!$&'()*+,=:@", c) >= 0:
				continue
			default:
				return false
			}
		}
		if s := p[start:i]; s == "." || s == ".." || (s == "" && i < len(p)) {
			return false
		}
		start = i + 1
	}
	return true
}
