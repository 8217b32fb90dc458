package pipeline

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanonicalPath(t *testing.T) {
	for _, c := range []struct {
		in, want, match string // match "" means want
		err             *PathError
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
		{in: "/../outside", err: ErrPathEscape},
		{in: "/x/%2F../admin", err: ErrPathSlash},
		{in: "/admin%2fx", err: ErrPathSlash},
		{in: "/x%5C..%5Cadmin", err: ErrPathSlash},
		{in: "/x%5c..%5cadmin", err: ErrPathSlash},
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
		{in: "/..", err: ErrPathEscape},
		{in: "/a/../..", err: ErrPathEscape},
		{in: "/a/../../b", err: ErrPathEscape},
		{in: "/%2e%2e/etc/passwd", err: ErrPathEscape},
		{in: "/...", want: "/..."},
		{in: "/a.b/..c/c..", want: "/a.b/..c/c.."},
		// Segment parameters: a dot segment whatever its parameters, an
		// empty name is an empty segment, other parameters are kept but
		// not matched.
		{in: "/..;/admin", err: ErrPathEscape},
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
		{in: "/%2561dmin", err: ErrPathDouble},
		{in: "/%25%36%31dmin", err: ErrPathDouble},
		{in: "/a%zz", err: ErrPathBadEncoding},
		{in: "/a%2", err: ErrPathBadEncoding},
		{in: "/a%", err: ErrPathBadEncoding},
		// Raw bytes EscapedPath would have encoded are encoded.
		{in: "/é", want: "/%C3%A9"},
		{in: "/a b", want: "/a%20b"},
		{in: "/a?b#c", want: "/a%3Fb%23c"},
		{in: "/[x]:@!$&'()*+,=", want: "/[x]:@!$&'()*+,="},
		// Refused.
		{in: "/a\\..\\admin", err: ErrPathSlash},
		{in: "/a%00b", err: ErrPathControl},
		{in: "/a%0a", err: ErrPathControl},
		{in: "/a%0D%0A", err: ErrPathControl},
		{in: "/a%7F", err: ErrPathControl},
		{in: "/a\x00", err: ErrPathControl},
		{in: "/a\x7f", err: ErrPathControl},
		{in: "/a\tb", err: ErrPathControl},
		{in: "", err: ErrPathRelative},
		{in: "*", err: ErrPathRelative},
		{in: "admin", err: ErrPathRelative},
	} {
		got, err := CanonicalPath(c.in)
		if c.err != nil {
			require.ErrorIs(t, err, c.err, "%q", c.in)
			require.True(t, IsPathError(err))
			continue
		}
		require.NoError(t, err, "%q", c.in)
		require.Equal(t, c.want, got, "%q", c.in)
		match := c.match
		if match == "" {
			match = strings.ToLower(c.want)
		}
		require.Equal(t, match, MatchPath(got), "%q", c.in)
	}
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
	again, err := CanonicalPath(c)
	require.NoError(t, err, "%q -> %q", in, c)
	require.Equal(t, c, again, "%q: not idempotent", in)
	m := MatchPath(c)
	require.True(t, strings.HasPrefix(m, "/"), "%q -> %q", in, m)
	require.NotContains(t, m, "//", "%q -> %q", in, m)
	require.NotContains(t, m, ";", "%q -> %q", in, m)
	require.Equal(t, m, MatchPath(m))
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
		c, err := CanonicalPath(in)
		if err != nil {
			require.True(t, IsPathError(err))
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
				c, _ := CanonicalPath(p)
				MatchPath(c)
			}
		})
	}
}
