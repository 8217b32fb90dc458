package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves one echo server that prefixes each line with name.
func echo(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, name+":"+sc.Text()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) string {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return got[:len(got)-1]
}

// TestProxy: bytes pass through delayed, held and released in order, and a
// new target takes new connections only.
func TestProxy(t *testing.T) {
	p, err := New(echo(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got := roundTrip(t, c, r, "1"); got != "a:1" {
		t.Fatalf("got %q", got)
	}
	p.SetDelay(time.Millisecond)
	if got := roundTrip(t, c, r, "2"); got != "a:2" {
		t.Fatalf("delayed: got %q", got)
	}
	p.SetDelay(0)
	p.Hold()
	for _, l := range []string{"3\n", "4\n"} {
		if _, err := io.WriteString(c, l); err != nil {
			t.Fatal(err)
		}
	}
	p.Release()
	for _, want := range []string{"a:3\n", "a:4\n"} {
		if got, err := r.ReadString('\n'); err != nil || got != want {
			t.Fatalf("after release: got %q, %v; want %q", got, err, want)
		}
	}
	p.SetTarget(echo(t, "b"))
	if got := roundTrip(t, c, r, "5"); got != "a:5" {
		t.Fatalf("an open connection moved: got %q", got)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := roundTrip(t, c2, bufio.NewReader(c2), "6"); got != "b:6" {
		t.Fatalf("a new connection: got %q, want the new target's", got)
	}
	// A cut ends a held connection too.
	p.Hold()
	p.Cut()
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after a cut")
	}
}
