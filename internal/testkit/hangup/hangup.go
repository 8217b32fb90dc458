// Package hangup is a client that goes away in the middle of a response,
// as a client escaping a cost known only at the response would: it sends a
// request over a TCP connection of its own, reads the response header and
// part of the body, then resets the connection (RST, not FIN), so that the
// server's next write fails at once.
//
//	resp := hangup.Get(t, srv.Listener.Addr().String(), "/v1/chat", 10<<20, "X-User", "u")
//
// The connection's receive buffer is kept small, so that little of the
// body beyond what was read can sit in the client's kernel: the server
// learns of the reset while it is still writing a body much larger than
// what was read plus its own send buffer (a few MiB on loopback).
package hangup

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ReadBuffer is the receive buffer of the client's connection, in bytes.
const ReadBuffer = 64 << 10

// Get sends "GET path" to addr (host:port) with the header fields hdr
// (name, value, ...), reads the response header and n bytes of its body
// (fewer if the body ends first), then resets the connection. It returns
// the response with its body already gone; the test fails if the
// exchange does (within a minute).
func Get(t testing.TB, addr, path string, n int64, hdr ...string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("hangup: dial %s: %v", addr, err)
	}
	conn := c.(*net.TCPConn)
	defer reset(conn)
	if err := conn.SetReadBuffer(ReadBuffer); err != nil {
		t.Fatalf("hangup: SetReadBuffer: %v", err)
	}
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("hangup: SetDeadline: %v", err)
	}
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\n", path, addr)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatalf("hangup: writing the request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 32<<10), nil)
	if err != nil {
		t.Fatalf("hangup: reading the response header: %v", err)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, n); err != nil && err != io.EOF {
		t.Fatalf("hangup: reading %d bytes of the body: %v", n, err)
	}
	resp.Body = http.NoBody
	return resp
}

// reset closes conn with a reset: no lingering, so the kernel sends RST
// and drops what the server sent that was not read.
func reset(conn *net.TCPConn) {
	conn.SetLinger(0)
	conn.Close()
}
