package qmptest

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// serve plays QEMU's side of one connection until it closes.
func (s *Server) serve(conn net.Conn) {
	wmu := &sync.Mutex{}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return
	}
	s.conn, s.wmu = conn, wmu
	s.mu.Unlock()

	var held sync.WaitGroup // replies waiting on Rule.After
	connDone := make(chan struct{})
	defer held.Wait()
	defer close(connDone)
	defer func() {
		s.mu.Lock()
		if s.conn == conn {
			s.conn = nil
		}
		s.mu.Unlock()
		_ = conn.Close()
	}()

	if !s.opts.NoGreeting {
		if err := write(conn, wmu, s.greeting()); err != nil {
			return
		}
	}
	c := &session{srv: s, conn: conn, wmu: wmu, done: connDone, held: &held}
	rd := &lineReader{conn: conn}
	for {
		line, files, err := rd.next()
		if err != nil {
			for _, f := range files {
				_ = f.Close()
			}
			return
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			c.handle(line, files)
		}
	}
}

func (s *Server) greeting() []byte {
	var g struct {
		QMP struct {
			Version struct {
				QEMU struct {
					Micro int `json:"micro"`
					Minor int `json:"minor"`
					Major int `json:"major"`
				} `json:"qemu"`
				Package string `json:"package"`
			} `json:"version"`
			Capabilities []string `json:"capabilities"`
		} `json:"QMP"`
	}
	g.QMP.Version.QEMU.Major = s.opts.Major
	g.QMP.Version.QEMU.Minor = s.opts.Minor
	g.QMP.Version.QEMU.Micro = s.opts.Micro
	g.QMP.Version.Package = s.opts.Package
	g.QMP.Capabilities = s.opts.Capabilities
	line, _ := json.Marshal(g) // plain types: cannot fail
	return line
}

// session is the per-connection state.
type session struct {
	srv        *Server
	conn       net.Conn
	wmu        *sync.Mutex
	done       chan struct{}
	held       *sync.WaitGroup
	negotiated bool
}

func (c *session) handle(line []byte, files []*os.File) {
	var req struct {
		Execute   string          `json:"execute"`
		ExecOOB   string          `json:"exec-oob"`
		Arguments json.RawMessage `json:"arguments"`
		ID        json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(line, &req); err != nil {
		for _, f := range files {
			_ = f.Close()
		}
		c.reply(nil, nil, &Error{Class: "GenericError", Desc: "JSON parse error, " + err.Error()})
		return
	}
	cmd := Command{
		Name: req.Execute, Args: req.Arguments, ID: req.ID, Files: files,
		Raw: append([]byte(nil), line...), Time: time.Now(),
	}
	if cmd.Name == "" {
		cmd.Name = req.ExecOOB
	}
	s := c.srv
	s.mu.Lock()
	s.commands = append(s.commands, cmd)
	close(s.arrived)
	s.arrived = make(chan struct{})
	var rule *Rule
	for _, r := range s.rules {
		if r.match(cmd) {
			rule = r
			break
		}
	}
	var r Rule
	if rule != nil {
		r = *rule // a snapshot: the script may change while a held reply waits
	}
	s.mu.Unlock()

	switch {
	case cmd.Name == "":
		c.reply(cmd.ID, nil, &Error{Class: "GenericError", Desc: "QMP input lacks member 'execute'"})
		return
	case !c.negotiated && cmd.Name != "qmp_capabilities":
		c.reply(cmd.ID, nil, &Error{Class: "CommandNotFound",
			Desc: "Expecting capabilities negotiation with 'qmp_capabilities'"})
		return
	case c.negotiated && cmd.Name == "qmp_capabilities" && rule == nil:
		c.reply(cmd.ID, nil, &Error{Class: "CommandNotFound",
			Desc: "Capabilities negotiation is already complete, command ignored"})
		return
	case rule == nil && cmd.Name == "qmp_capabilities":
		c.negotiated = true
		c.reply(cmd.ID, nil, nil)
		return
	case rule == nil:
		c.reply(cmd.ID, nil, &Error{Class: "CommandNotFound",
			Desc: "The command " + cmd.Name + " has not been found"})
		return
	}

	if r.closeConn {
		_ = c.conn.Close()
		return
	}
	if r.noReply {
		return
	}
	ret, errReply := r.ret, r.err
	if r.do != nil {
		ret, errReply = r.do(cmd)
	}
	if cmd.Name == "qmp_capabilities" && errReply == nil {
		c.negotiated = true
	}
	respond := func() {
		for _, e := range r.events {
			if line, err := eventLine(e.name, e.data); err == nil {
				_ = write(c.conn, c.wmu, line)
			}
		}
		c.reply(cmd.ID, ret, errReply)
	}
	if r.after == nil {
		respond()
		return
	}
	c.held.Add(1)
	go func() {
		defer c.held.Done()
		select {
		case <-r.after:
			respond()
		case <-c.done:
		case <-s.quit:
		}
	}()
}

// reply writes {"return": ret, "id": id} or {"id": id, "error": {...}} like QEMU.
func (c *session) reply(id json.RawMessage, ret any, errReply *Error) {
	var line []byte
	var err error
	if errReply != nil {
		line, err = json.Marshal(struct {
			ID    json.RawMessage `json:"id,omitempty"`
			Error *Error          `json:"error"`
		}{id, errReply})
	} else {
		if ret == nil {
			ret = struct{}{}
		}
		line, err = json.Marshal(struct {
			Return any             `json:"return"`
			ID     json.RawMessage `json:"id,omitempty"`
		}{ret, id})
	}
	if err != nil {
		line, _ = json.Marshal(map[string]any{"id": id, "error": Error{Class: "GenericError", Desc: "qmptest: cannot encode scripted reply: " + err.Error()}})
	}
	_ = write(c.conn, c.wmu, line)
}

// lineReader splits the stream into lines and collects SCM_RIGHTS descriptors; descriptors are
// handed out with the first line completed at or after the read that carried them.
type lineReader struct {
	conn  net.Conn
	buf   []byte
	files []*os.File
}

func (r *lineReader) next() ([]byte, []*os.File, error) {
	chunk := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(16*4))
	for {
		if i := bytes.IndexByte(r.buf, '\n'); i >= 0 {
			line := append([]byte(nil), r.buf[:i]...)
			r.buf = r.buf[i+1:]
			files := r.files
			r.files = nil
			return line, files, nil
		}
		var n, oobn int
		var err error
		if uc, ok := r.conn.(*net.UnixConn); ok {
			n, oobn, _, _, err = uc.ReadMsgUnix(chunk, oob)
			if oobn > 0 {
				r.files = append(r.files, parseRights(oob[:oobn])...)
			}
		} else {
			n, err = r.conn.Read(chunk)
		}
		if n > 0 {
			r.buf = append(r.buf, chunk[:n]...)
		}
		if err != nil {
			files := r.files
			r.files = nil
			return nil, files, err
		}
	}
}

func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "qmptest-received-fd"))
		}
	}
	return files
}
