package frontends_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"
)

type rawResp struct {
	code    int
	header  http.Header
	body    string
	trailer http.Header
}

// roundTripRaw writes req on a new connection and reads one response.
func roundTripRaw(addr, req string, head bool) (rawResp, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return rawResp{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return rawResp{}, err
	}
	method := "GET"
	if head {
		method = "HEAD"
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		return rawResp{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{resp.StatusCode, resp.Header, string(b), resp.Trailer}, nil
}
