package subresclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"k8s.io/client-go/transport/websocket"
	"k8s.io/streaming/pkg/httpstream"
)

// Subprotocol is the websocket subprotocol of every stream (KubeVirt's).
const Subprotocol = "plain.kubevirt.io"

// ClosedError is a stream the server closed with a reason ("console taken over by another
// client"); a close with no reason is io.EOF.
type ClosedError struct {
	Code int
	Text string
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("closed by the server: %s (%d)", e.Text, e.Code)
}

// dial opens the websocket of one subresource: console, vnc, qmp, portforward/PORT. ctx bounds
// the handshake only.
func (c *Client) dial(ctx context.Context, vmi VMI, sub ...string) (*gwebsocket.Conn, error) {
	rt, holder, err := websocket.RoundTripperFor(c.streamCfg)
	if err != nil {
		return nil, fmt.Errorf("websocket transport: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL(vmi, sub...).String(), nil)
	if err != nil {
		return nil, fmt.Errorf("websocket request: %w", err)
	}
	conn, err := websocket.Negotiate(rt, holder, req, Subprotocol)
	if err != nil {
		var up *httpstream.UpgradeFailureError
		if errors.As(err, &up) && up.Cause != nil {
			err = up.Cause // a *StatusError when the server said why (403, 404, 409)
		}
		return nil, fmt.Errorf("connect to %s of vmi %s: %w", joinSub(sub), vmi, err)
	}
	return conn, nil
}

// Dial opens a byte stream: console, vnc, portforward/PORT.
func (c *Client) Dial(ctx context.Context, vmi VMI, sub ...string) (*Stream, error) {
	conn, err := c.dial(ctx, vmi, sub...)
	if err != nil {
		return nil, err
	}
	return &Stream{conn: conn}, nil
}

// PortForward opens one TCP connection to the guest's port.
func (c *Client) PortForward(ctx context.Context, vmi VMI, port int) (*Stream, error) {
	return c.Dial(ctx, vmi, "portforward", fmt.Sprint(port))
}

// Stream is a websocket of binary frames as an io.ReadWriteCloser: Read returns the frames'
// bytes in order, Write sends one binary frame. One reader and one writer at a time; Close
// may be called from any goroutine.
type Stream struct {
	conn *gwebsocket.Conn
	cur  io.Reader
	once sync.Once
}

func (s *Stream) Read(p []byte) (int, error) {
	for {
		if s.cur == nil {
			_, r, err := s.conn.NextReader()
			if err != nil {
				return 0, closeErr(err)
			}
			s.cur = r
		}
		n, err := s.cur.Read(p)
		if err == io.EOF {
			s.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (s *Stream) Write(p []byte) (int, error) {
	if err := s.conn.WriteMessage(gwebsocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite tells the server this side sends no more (a websocket close frame); reads go
// on until the server closes too.
func (s *Stream) CloseWrite() error {
	msg := gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, "")
	return s.conn.WriteControl(gwebsocket.CloseMessage, msg, time.Now().Add(time.Second))
}

// Close says goodbye (a close frame, best effort) and closes the connection.
func (s *Stream) Close() error {
	var err error
	s.once.Do(func() {
		_ = s.CloseWrite() // the peer may be gone already
		err = s.conn.Close()
	})
	return err
}

// closeErr maps a websocket read error: a normal close without reason is io.EOF, a close
// with a reason a *ClosedError.
func closeErr(err error) error {
	var ce *gwebsocket.CloseError
	if errors.As(err, &ce) {
		if ce.Text == "" && (ce.Code == gwebsocket.CloseNormalClosure || ce.Code == gwebsocket.CloseGoingAway) {
			return io.EOF
		}
		return &ClosedError{Code: ce.Code, Text: ce.Text}
	}
	return err
}

// QMPSession is the qmp websocket: one command object per text frame, QEMU's reply to each
// in order. A goroutine reads the replies, so a session the server ends is seen at once
// (Done) even between commands.
type QMPSession struct {
	conn    *gwebsocket.Conn
	replies chan []byte
	done    chan struct{}
	err     error // why the session ended; set before done is closed
}

// DialQMP opens a QMP session.
func (c *Client) DialQMP(ctx context.Context, vmi VMI) (*QMPSession, error) {
	conn, err := c.dial(ctx, vmi, "qmp")
	if err != nil {
		return nil, err
	}
	q := &QMPSession{conn: conn, replies: make(chan []byte, 1), done: make(chan struct{})}
	go q.read()
	return q, nil
}

func (q *QMPSession) read() {
	for {
		_, reply, err := q.conn.ReadMessage()
		if err != nil {
			q.err = closeErr(err)
			close(q.done)
			return
		}
		select {
		case q.replies <- reply:
		case <-q.done:
			return
		}
	}
}

// Done is closed when the session has ended (Err says why).
func (q *QMPSession) Done() <-chan struct{} { return q.done }

// Err is why the session ended: io.EOF, a *ClosedError with the server's reason, or the
// connection's error; nil while it lasts.
func (q *QMPSession) Err() error {
	select {
	case <-q.done:
		return q.err
	default:
		return nil
	}
}

// Do sends one command and returns its reply, within ctx's deadline. One command at a time.
func (q *QMPSession) Do(ctx context.Context, command []byte) ([]byte, error) {
	dl, _ := ctx.Deadline() // zero: none
	_ = q.conn.SetWriteDeadline(dl)
	if err := q.conn.WriteMessage(gwebsocket.TextMessage, command); err != nil {
		if e := q.Err(); e != nil {
			err = e
		}
		return nil, fmt.Errorf("send qmp command: %w", err)
	}
	select {
	case reply := <-q.replies:
		return reply, nil
	case <-q.done:
		select { // a reply that came just before the end
		case reply := <-q.replies:
			return reply, nil
		default:
		}
		return nil, fmt.Errorf("read qmp reply: %w", q.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("read qmp reply: %w", ctx.Err())
	}
}

// Close ends the session.
func (q *QMPSession) Close() error {
	msg := gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, "")
	_ = q.conn.WriteControl(gwebsocket.CloseMessage, msg, time.Now().Add(time.Second))
	return q.conn.Close()
}
