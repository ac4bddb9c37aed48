package qmptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// ErrNoConn means no client is connected, so there is nobody to send to.
var ErrNoConn = errors.New("qmptest: no client connected")

// Options shape the fake's greeting.
type Options struct {
	Major, Minor, Micro int      // QEMU version; zero means 7.2.0
	Package             string   // "package" string of the greeting
	Capabilities        []string // offered capabilities; nil means ["oob"]
	// NoGreeting makes the fake send nothing on connect (a wedged or non-QMP peer).
	NoGreeting bool
}

// Command is one command the fake received.
type Command struct {
	Name  string          // "execute" (or "exec-oob") value
	Args  json.RawMessage // "arguments", nil if absent
	ID    json.RawMessage // "id", nil if absent
	Raw   []byte          // the line as received
	Files []*os.File      // descriptors received with it via SCM_RIGHTS; closed by Server.Close
	Time  time.Time
}

// Server is the fake QMP peer. It serves one connection at a time, like QEMU.
type Server struct {
	opts Options

	mu       sync.Mutex
	rules    []*Rule
	commands []Command
	arrived  chan struct{} // closed and replaced whenever a command is recorded
	conn     net.Conn      // current client
	wmu      *sync.Mutex   // serializes writes to conn
	ln       net.Listener
	closed   bool
	quit     chan struct{} // closed by Close
	wg       sync.WaitGroup
}

// NewServer returns a fake with no rules: qmp_capabilities is answered, every other command gets
// CommandNotFound like QEMU, until scripted with On.
func NewServer(opts Options) *Server {
	if opts.Major == 0 && opts.Minor == 0 && opts.Micro == 0 {
		opts.Major, opts.Minor = 7, 2
	}
	if opts.Capabilities == nil {
		opts.Capabilities = []string{"oob"}
	}
	return &Server{opts: opts, arrived: make(chan struct{}), quit: make(chan struct{})}
}

// On adds a rule for commands called name; by default it answers {"return": {}}.
func (s *Server) On(name string) *Rule {
	r := &Rule{srv: s, name: name, times: -1}
	s.mu.Lock()
	s.rules = append(s.rules, r)
	s.mu.Unlock()
	return r
}

// Pipe serves one end of a net.Pipe and returns the other end for the client.
func (s *Server) Pipe() net.Conn {
	client, server := net.Pipe()
	s.goServe(server)
	return client
}

// Listen serves clients on a unix socket at path, one at a time, until Close. Unlike net.Pipe
// it carries SCM_RIGHTS.
func (s *Server) Listen(path string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrNoConn
	}
	s.ln = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.serve(conn)
		}
	}()
	return nil
}

// ServeConn serves conn until it closes (or Close). It blocks.
func (s *Server) ServeConn(conn net.Conn) {
	s.wg.Add(1)
	defer s.wg.Done()
	s.serve(conn)
}

func (s *Server) goServe(conn net.Conn) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serve(conn)
	}()
}

// Commands returns the commands received so far, in order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Command(nil), s.commands...)
}

// WaitCommand returns the first received command called name, waiting for it if needed.
func (s *Server) WaitCommand(ctx context.Context, name string) (Command, error) {
	cmds, err := s.WaitCommands(ctx, name, 1)
	if err != nil {
		return Command{}, err
	}
	return cmds[0], nil
}

// WaitCommands waits until n commands called name have been received and returns the first n.
func (s *Server) WaitCommands(ctx context.Context, name string, n int) ([]Command, error) {
	for {
		var got []Command
		s.mu.Lock()
		for _, c := range s.commands {
			if c.Name == name && len(got) < n {
				got = append(got, c)
			}
		}
		arrived := s.arrived
		s.mu.Unlock()
		if len(got) == n {
			return got, nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for %d %s commands (have %d): %w", n, name, len(got), ctx.Err())
		}
	}
}

// Emit sends event name with data (nil for none) to the connected client now.
func (s *Server) Emit(name string, data any) error {
	line, err := eventLine(name, data)
	if err != nil {
		return err
	}
	return s.Send(line)
}

// Send writes one raw line (a line ending is added) to the connected client.
func (s *Server) Send(line []byte) error {
	s.mu.Lock()
	conn, wmu := s.conn, s.wmu
	s.mu.Unlock()
	if conn == nil {
		return ErrNoConn
	}
	return write(conn, wmu, line)
}

// CloseConn drops the current client connection, as if QEMU died.
func (s *Server) CloseConn() error {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return ErrNoConn
	}
	return conn.Close()
}

// Close stops serving, closes the listener and connection, waits for the fake's goroutines and
// closes all received files.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	ln, conn := s.ln, s.conn
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	if conn != nil {
		_ = conn.Close()
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.commands {
		for _, f := range c.Files {
			_ = f.Close()
		}
	}
	return nil
}

func write(conn net.Conn, wmu *sync.Mutex, line []byte) error {
	wmu.Lock()
	defer wmu.Unlock()
	buf := make([]byte, 0, len(line)+2)
	buf = append(append(buf, line...), '\r', '\n') // QEMU ends lines with CRLF
	if _, err := conn.Write(buf); err != nil {
		return fmt.Errorf("write to client: %w", err)
	}
	return nil
}

func eventLine(name string, data any) ([]byte, error) {
	now := time.Now()
	ev := struct {
		Timestamp struct {
			Seconds      int64 `json:"seconds"`
			Microseconds int64 `json:"microseconds"`
		} `json:"timestamp"`
		Event string `json:"event"`
		Data  any    `json:"data,omitempty"`
	}{Event: name, Data: data}
	ev.Timestamp.Seconds = now.Unix()
	ev.Timestamp.Microseconds = int64(now.Nanosecond() / 1000)
	line, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", name, err)
	}
	return line, nil
}
