package frontends_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

type rawResp struct {
	code    int
	header  http.Header
	body    string
	trailer http.Header
}

// roundTripRaw writes req on a new connection and reads one response.
func roundTripRaw(addr, req string, head bool) (rawResp, error) {
	// No time bound but the test's: a loaded machine answers late, not
	// wrongly.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return rawResp{}, err
	}
	defer conn.Close()
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
