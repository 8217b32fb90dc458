package redact

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/rl", "postgres://app:xxxxx@db:5432/rl"},
		{"postgres://app@db/rl?password=s3cret&sslmode=require", "postgres://app@db/rl?password=xxxxx&sslmode=require"},
		{"https://user:pa%40ss@upstream.example/base", "https://user:xxxxx@upstream.example/base"},
		{"http://upstream:8080", "http://upstream:8080"},
		{"host=db user=app password=s3cret dbname=rl", "host=db user=app password=xxxxx dbname=rl"},
		{"host=db password = 's3 cr\\'et' sslmode=disable", "host=db password = xxxxx sslmode=disable"},
		{"host=db sslpassword=k3y", "host=db sslpassword=xxxxx"},
		{"demo", "demo"},
		{"postgres://%zz:pw@db", "<unparsable URL>"},
		// Issue 19, 10: an upstream's query secrets, libpq's options.
		{"https://up.example/api?access_token=s3cret&v=2", "https://up.example/api?access_token=xxxxx&v=2"},
		{"https://up.example/?X-Amz-Signature=s3cret&client_secret=s3cret", "https://up.example/?X-Amz-Signature=xxxxx&client_secret=xxxxx"},
		{"postgres://app@db/rl?options=-c%20password%3Ds3cret", "postgres://app@db/rl?options=xxxxx"},
		{"host=db options='-c password=s3cret'", "host=db options=xxxxx"},
		{"host=db options='-c search_path=rl'", "host=db options='-c search_path=rl'"},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"postgres://a:secretpw@h/d", "host=h password=secretpw", "password='secretpw'", "x://u:secretpw@h?token=secretpw"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		String(s) // never panics
		// A keyword password never survives, whatever follows it.
		const pw = "Zq9secretpw"
		in := "host=h password=" + pw + " " + s
		if out := String(in); strings.Contains(out, pw) && !strings.Contains(s, pw) {
			t.Fatalf("String(%q) kept the password: %q", in, out)
		}
		// Nor a URL's.
		in = "postgres://u:" + pw + "@h/d?" + s
		if out := String(in); strings.Contains(out, pw) && !strings.Contains(s, pw) && out != "<unparsable URL>" {
			t.Fatalf("String(%q) kept the password: %q", in, out)
		}
	})
}

// Digest is the first 16 hex digits of the key's SHA-256 (what
// sha256sum prints), the same for the same key, and never holds the key.
func TestDigest(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"", "e3b0c44298fc1c14"},
		{"abc", "ba7816bf8f01cfea"},
		{"sk_live_0123456789abcdef", ""},
	} {
		got := Digest(tc.key)
		if len(got) != 16 || (tc.want != "" && got != tc.want) {
			t.Errorf("Digest(%q) = %q, want %q", tc.key, got, tc.want)
		}
		if tc.key != "" && strings.Contains(got, tc.key) {
			t.Errorf("Digest(%q) = %q holds the key", tc.key, got)
		}
		if Digest(tc.key) != got {
			t.Errorf("Digest(%q) changed", tc.key)
		}
	}
	if Digest("a") == Digest("b") {
		t.Error("two keys, one digest")
	}
}
