// Package tcpproxy is an in-process TCP proxy for outage tests: put it
// between a client and a server, then Cut it (every connection dropped, new
// ones refused) and Restore it, as a network partition would.
package tcpproxy

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New listens on 127.0.0.1 (a free port) and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore accepts and forwards connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			if !p.track(s) {
				return
			}
			defer p.untrack(s)
			done := make(chan struct{}, 2)
			go func() { io.Copy(s, c); done <- struct{}{} }()
			go func() { io.Copy(c, s); done <- struct{}{} }()
			<-done
		}()
	}
}
