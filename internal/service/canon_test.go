package service

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanonicalPath(t *testing.T) {
	for _, c := range []struct {
		in, want, match string // match "" means want
		err             *errPath
	}{
		{in: "/", want: "/"},
		{in: "/admin", want: "/admin"},
		{in: "/v1/pay/refund", want: "/v1/pay/refund"},
		// The forms of issue 9.
		{in: "/x/%2e%2e/admin", want: "/admin"},
		{in: "//admin", want: "/admin"},
		{in: "/./admin", want: "/admin"},
		{in: "/x/../admin", want: "/admin"},
		{in: "/admin;x", want: "/admin;x", match: "/admin"},
		{in: "/../outside", err: errPathEscape},
		{in: "/x/%2F../admin", err: errPathSlash},
		{in: "/admin%2fx", err: errPathSlash},
		{in: "/x%5C..%5Cadmin", err: errPathSlash},
		{in: "/x%5c..%5cadmin", err: errPathSlash},
		{in: "/x/%2E%2E/admin", want: "/admin"},
		{in: "/x/%2E%2e/admin", want: "/admin"},
		{in: "/x/.%2E/admin", want: "/admin"},
		// Dot segments (RFC 3986 §5.2.4) and repeated slashes.
		{in: "/a/b/c/./../../g", want: "/a/g"},
		{in: "/a/b/", want: "/a/b/"},
		{in: "/a//b//", want: "/a/b/"},
		{in: "///", want: "/"},
		{in: "/a/.", want: "/a/"},
		{in: "/a/..", want: "/"},
		{in: "/a/b/../..", want: "/"},
		{in: "/a/./", want: "/a/"},
		{in: "/%2e", want: "/"},
		{in: "/..", err: errPathEscape},
		{in: "/a/../..", err: errPathEscape},
		{in: "/a/../../b", err: errPathEscape},
		{in: "/%2e%2e/etc/passwd", err: errPathEscape},
		{in: "/...", want: "/..."},
		{in: "/a.b/..c/c..", want: "/a.b/..c/c.."},
		// Segment parameters: a dot segment whatever its parameters, an
		// empty name is an empty segment, other parameters are kept but
		// not matched.
		{in: "/..;/admin", err: errPathEscape},
		{in: "/x/..;y/admin", want: "/admin"},
		{in: "/x/.;y/admin", want: "/x/admin"},
		{in: "/;x/admin", want: "/admin"},
		{in: "/admin/;x", want: "/admin/;x", match: "/admin/"},
		{in: "/admin;a=1;b=2/Refund;c", want: "/admin;a=1;b=2/Refund;c", match: "/admin/refund"},
		{in: "/admin%3bx", want: "/admin%3Bx", match: "/admin%3bx"}, // data, not a delimiter
		// Percent-encoding: unreserved decoded, the rest kept in upper case.
		{in: "/%61dmin", want: "/admin"},
		{in: "/%41DMIN", want: "/ADMIN", match: "/admin"},
		{in: "/%7euser/%2D%5f", want: "/~user/-_"},
		{in: "/a%20b", want: "/a%20b"},
		{in: "/a%c3%a9", want: "/a%C3%A9"},
		{in: "/100%25", want: "/100%25"},
		{in: "/50%25off", want: "/50%25off"},
		{in: "/%2561dmin", err: errPathDouble},
		{in: "/%25%36%31dmin", err: errPathDouble},
		{in: "/a%zz", err: errPathBadEncoding},
		{in: "/a%2", err: errPathBadEncoding},
		{in: "/a%", err: errPathBadEncoding},
		// Raw bytes EscapedPath would have encoded are encoded.
		{in: "/é", want: "/%C3%A9"},
		{in: "/a b", want: "/a%20b"},
		{in: "/a?b#c", want: "/a%3Fb%23c"},
		{in: "/[x]:@!$&'()*+,=", want: "/[x]:@!$&'()*+,="},
		// Refused.
		{in: "/a\\..\\admin", err: errPathSlash},
		{in: "/a%00b", err: errPathControl},
		{in: "/a%0a", err: errPathControl},
		{in: "/a%0D%0A", err: errPathControl},
		{in: "/a%7F", err: errPathControl},
		{in: "/a\x00", err: errPathControl},
		{in: "/a\x7f", err: errPathControl},
		{in: "/a\tb", err: errPathControl},
		{in: "", err: errPathRelative},
		{in: "*", err: errPathRelative},
		{in: "admin", err: errPathRelative},
	} {
		got, err := canonicalPath(c.in)
		if c.err != nil {
			require.ErrorIs(t, err, c.err, "%q", c.in)
			require.True(t, isErrPath(err))
			continue
		}
		require.NoError(t, err, "%q", c.in)
		require.Equal(t, c.want, got, "%q", c.in)
		match := c.match
		if match == "" {
			match = strings.ToLower(c.want)
		}
		require.Equal(t, match, matchPath(got), "%q", c.in)
	}
}

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.com":          "api.example.com",
		"API.Example.COM":          "api.example.com",
		"api.example.com:8443":     "api.example.com",
		"api.example.com.":         "api.example.com",
		"api.example.com..":        "api.example.com",
		"Api.Example.Com.:443":     "api.example.com",
		"[2001:DB8::1]:8080":       "2001:db8::1",
		"[2001:DB8:0::0001]:80":    "2001:db8::1",
		"2001:0db8:0:0:0:0:0:1":    "2001:db8::1",
		"[::FFFF:C000:0201]":       "::ffff:192.0.2.1",
		"[fe80::1%eth0]:80":        "fe80::1%eth0",
		"[::1]":                    "::1",
		"192.0.2.1:80":             "192.0.2.1",
		"":                         "",
		"localhost":                "localhost",
		"xn--bcher-kva.example:80": "xn--bcher-kva.example",
	} {
		require.Equal(t, want, canonicalHost(in), in)
	}
	require.Equal(t, "*.example.org", ruleHost("*.Example.ORG."))
	require.Equal(t, "api.example.com", ruleHost("api.example.com.:443"))
	require.Equal(t, "2001:db8::1", ruleHost("2001:DB8::0001"))
}

// checkCanonical checks the invariants of a canonical path c.
func checkCanonical(t *testing.T, in, c string) {
	t.Helper()
	require.True(t, strings.HasPrefix(c, "/"), "%q -> %q", in, c)
	for _, bad := range []string{"//", "/./", "/../", "\\", "%2F", "%5C", "%00"} {
		require.NotContains(t, c, bad, "%q -> %q", in, c)
	}
	require.False(t, strings.HasSuffix(c, "/.") || strings.HasSuffix(c, "/.."), "%q -> %q", in, c)
	segs := strings.Split(c[1:], "/")
	for i, s := range segs {
		name, _, _ := strings.Cut(s, ";")
		require.NotContains(t, []string{".", ".."}, name, "%q -> %q: segment %d is a dot segment", in, c, i)
		if i < len(segs)-1 {
			require.NotEmpty(t, name, "%q -> %q: empty segment %d", in, c, i)
		}
	}
	for i := 0; i < len(c); i++ {
		require.True(t, c[i] == '%' || isPathByte(c[i]), "%q -> %q: byte %d", in, c, i)
	}
	again, err := canonicalPath(c)
	require.NoError(t, err, "%q -> %q", in, c)
	require.Equal(t, c, again, "%q: not idempotent", in)
	m := matchPath(c)
	require.True(t, strings.HasPrefix(m, "/"), "%q -> %q", in, m)
	require.NotContains(t, m, "//", "%q -> %q", in, m)
	require.NotContains(t, m, ";", "%q -> %q", in, m)
	require.Equal(t, m, matchPath(m))
	// The forwarded URL carries exactly c.
	dec, err := url.PathUnescape(c)
	require.NoError(t, err)
	u := url.URL{Path: dec, RawPath: c}
	require.Equal(t, c, u.EscapedPath(), "%q", in)
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/", "/admin", "//admin", "/./admin", "/x/../admin", "/x/%2e%2e/admin", "/admin;x",
		"/../outside", "/a%2Fb", "/a%5cb", "/..;/a", "/a/;x", "/%2561", "/a/b/c/./../../g", "/é", "/a%00", "/;/;/..;x/",
		"/%2E%2E", "/.%2e/", "/a//..//b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := canonicalPath(in)
		if err != nil {
			require.True(t, isErrPath(err))
			return
		}
		checkCanonical(t, in, c)
	})
}

func BenchmarkCanonicalPath(b *testing.B) {
	for _, p := range []string{"/v1/pay/refund", "/x/%2e%2e/v1//pay;x"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, _ := canonicalPath(p)
				matchPath(c)
			}
		})
	}
}
