// Package tcpproxy is an in-process TCP proxy for outage tests: put it
// between a client and a server, then Cut it (every connection dropped, new
// ones refused) and Restore it, as a network partition would; Delay what
// it forwards, as a slow link would; Hold it (connections kept open,
// nothing forwarded) and Release it, as a stalled peer would; or point it
// at another address (SetTarget), as a restarted server behind a stable
// name would be.
package tcpproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup

	delay    time.Duration // added to every chunk forwarded
	held     bool          // nothing is forwarded while set
	released *sync.Cond    // on mu: held was cleared
}

// New listens on 127.0.0.1 (a free port) and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.released = sync.NewCond(&p.mu)
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
	p.released.Broadcast() // a held pipe sees the cut
}

// Restore accepts and forwards connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// SetTarget makes new connections go to target; open ones stay where they
// are (Cut them to move them).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetDelay delays every chunk of bytes read from now on by d, in each
// direction, keeping their order: a link d slower each way.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Hold stops forwarding in both directions; connections stay open, and
// what they send waits in the proxy until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release forwards again what Hold kept, and what follows.
func (p *Proxy) Release() {
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
	p.released.Broadcast()
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Release()
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
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			s, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			if !p.track(s) {
				return
			}
			defer p.untrack(s)
			done := make(chan struct{}, 2)
			go func() { p.pipe(s, c); done <- struct{}{} }()
			go func() { p.pipe(c, s); done <- struct{}{} }()
			<-done
		}()
	}
}

// chunk is bytes read, and when they may be written.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst as io.Copy does, each chunk after the delay set
// when it was read, and none while the proxy is held.
func (p *Proxy) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				ch <- chunk{b[:n], time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d) // the link's delay, not a test waiting for an event
		}
		p.mu.Lock()
		for p.held && !p.cut {
			p.released.Wait()
		}
		cut := p.cut
		p.mu.Unlock()
		if cut {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close() // ends the reader's peer too, as io.Copy's caller does
	src.Close()
	for range ch {
	}
}
