package hostile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Closer is a raw HTTP/1.1 server that answers every request with
// "Connection: keep-alive" and then closes the connection a random
// 0..MaxDelay after the response, as llama.cpp's server does (it closes
// as it ends a streamed reply) or a few milliseconds later. A request
// that arrives on the connection meanwhile races the close and is never
// read: the server closes with it unread (a reset). It counts the
// requests it processed by request id, the truth a test holds a client
// to: none lost to a close, none processed twice.
//
// A chat request is answered with max_tokens text chunks (at most 256)
// Gap apart, usage included; any other path with an empty JSON object.
type Closer struct {
	Addr     string
	MaxDelay time.Duration
	Gap      time.Duration

	ln net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	processed map[string]int
	late      int
}

// LateClose is how long after its response a close must come to be late:
// a client that does not know yet whether the server keeps connections
// waits 50 ms before it reuses one just idle (prober's settle), so a
// close within it is seen before the next request is written, and one
// after it may race that request. The server sleeps at most MaxDelay (a
// few ms) but on a busy host its timer can fire tens of ms late: the
// tests take those late closes as their truth of what could be lost.
// Half the settle, not all of it: the client's clock of the response's
// end and its look at the socket run on the same busy host (beside three
// race-enabled test packages, one request was lost to a close the server
// timed under 50 ms).
const LateClose = 25 * time.Millisecond

// StartCloser starts a Closer on loopback.
func StartCloser(maxDelay, gap time.Duration) (*Closer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Closer{Addr: ln.Addr().String(), MaxDelay: maxDelay, Gap: gap, ln: ln, processed: map[string]int{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	return s, nil
}

// URL is the server's base URL, ".../v1".
func (s *Closer) URL() string { return "http://" + s.Addr + "/v1" }

// Close stops the server and waits for its connections to end.
func (s *Closer) Close() {
	s.ln.Close()
	s.wg.Wait()
}

// Late is how many connections the server closed LateClose or more after
// the end of their response (its timer fired late on a busy host).
func (s *Closer) Late() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late
}

// Processed is how many times the server processed each request id.
func (s *Closer) Processed() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.processed))
	for id, n := range s.processed {
		out[id] = n
	}
	return out
}

// serve answers one request on c, then closes c after a random delay
// without reading anything more.
func (s *Closer) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(maxServe))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, parseLimit))
	if err != nil {
		return
	}
	s.mu.Lock()
	s.processed[req.Header.Get("X-Request-Id")]++
	s.mu.Unlock()
	if !strings.HasSuffix(req.URL.Path, "/chat/completions") {
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}")
	} else {
		var asked struct {
			MaxTokens int `json:"max_tokens"`
		}
		_ = json.Unmarshal(body, &asked)
		tokens := min(max(asked.MaxTokens, 1), 256)
		if _, err := fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		chunk := func(data string) error {
			ev := "data: " + data + "\n\n"
			_, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
			return err
		}
		for i := range tokens {
			if i > 0 && s.Gap > 0 {
				time.Sleep(s.Gap)
			}
			if chunk(`{"choices":[{"index":0,"delta":{"content":"tok "}}]}`) != nil {
				return
			}
		}
		if chunk(fmt.Sprintf(`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":16,"completion_tokens":%d}}`, tokens)) != nil ||
			chunk("[DONE]") != nil {
			return
		}
		if _, err := fmt.Fprint(c, "0\r\n\r\n"); err != nil {
			return
		}
	}
	// The close, a little after the response: a request written
	// meanwhile is left unread.
	ended := time.Now()
	if s.MaxDelay > 0 {
		time.Sleep(rand.N(s.MaxDelay + 1))
	}
	_ = c.Close() // timed with the close, not before it
	if time.Since(ended) >= LateClose {
		s.mu.Lock()
		s.late++
		s.mu.Unlock()
	}
}
