package qga

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// errStale marks input that is not the awaited reply; it is discarded.
var errStale = errors.New("stale reply")

// sync writes 0xFF + guest-sync-delimited and reads until the matching reply. Called under the
// request lock with the deadline set.
func (a *Agent) sync(cmd string) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := int64(binary.LittleEndian.Uint64(b[:]) >> 12) // positive and exact in a float64
	line := fmt.Appendf(nil, `{"execute":"guest-sync-delimited","arguments":{"id":%d}}`, id)
	a.tap(qmp.Sent, qmp.KindCommand, line)
	if _, err := a.conn.Write(append(append([]byte{delimiter}, line...), '\n')); err != nil {
		return fmt.Errorf("write guest-sync-delimited before %s: %w", cmd, err)
	}
	for {
		// Everything before the agent's delimiter is stale: replies to abandoned requests and
		// the parse error the agent answers our 0xFF with.
		if err := a.skipToDelimiter(); err != nil {
			return fmt.Errorf("read guest-sync-delimited reply: %w", err)
		}
		line, err := a.readDelimited()
		if err != nil {
			return fmt.Errorf("read guest-sync-delimited reply: %w", err)
		}
		if line == nil {
			continue // too long for a sync reply: skip to the next delimiter
		}
		var rep struct {
			Return *int64 `json:"return"`
		}
		if json.Unmarshal(line, &rep) == nil && rep.Return != nil && *rep.Return == id {
			a.tap(qmp.Received, qmp.KindReply, line)
			a.synced = true
			return nil
		}
		a.tap(qmp.Received, qmp.KindUnknown, line) // a stale sync reply
	}
}

// skipToDelimiter discards input up to and including the next 0xFF, without buffering it.
func (a *Agent) skipToDelimiter() error {
	for {
		skipped, err := a.r.ReadSlice(delimiter)
		if len(skipped) > 1 {
			a.tap(qmp.Received, qmp.KindUnknown, bytes.TrimSpace(skipped[:len(skipped)-1]))
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// maxSyncLine bounds the line read after a delimiter: a guest-sync-delimited reply is
// {"return": N} with N below 2^53, far shorter.
const maxSyncLine = 256

// readDelimited reads what follows a delimiter up to the end of the line, starting over after
// every further delimiter in it: the agent writes its 0xFF right before its reply, so stale
// input between two delimiters (a partial line, a reply to an abandoned request) is never part
// of the candidate. It returns nil, not an error, for a line longer than maxSyncLine (not a
// sync reply), having buffered at most that much of it.
func (a *Agent) readDelimited() ([]byte, error) {
	var line []byte
	for {
		chunk, err := a.r.ReadSlice('\n')
		if i := bytes.LastIndexByte(chunk, delimiter); i >= 0 {
			line, chunk = line[:0], chunk[i+1:]
		}
		if len(line)+len(chunk) > maxSyncLine {
			a.tap(qmp.Received, qmp.KindUnknown, bytes.TrimSpace(append(line, chunk...)))
			return nil, nil
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSpace(line), nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}

// readReply reads lines until the reply carrying id, discarding others (stale replies).
func (a *Agent) readReply(id string) (json.RawMessage, error) {
	for {
		line, err := a.readLine()
		if err != nil {
			return nil, fmt.Errorf("read reply: %w", err)
		}
		ret, err := decodeReply(line, id)
		if errors.Is(err, errStale) {
			a.tap(qmp.Received, qmp.KindUnknown, line)
			continue
		}
		a.tap(qmp.Received, qmp.KindReply, line)
		return ret, err
	}
}

// reply is one decoded reply line.
type reply struct {
	ret   json.RawMessage
	err   *qmp.Error
	id    string
	hasID bool // the line carried a string id (id holds it)
}

// parseReply decodes a {"return"|"error", "id"} line; ok is false for anything else.
func parseReply(line []byte) (rep reply, ok bool) {
	var w struct {
		Return json.RawMessage `json:"return"`
		Error  *qmp.Error      `json:"error"`
		ID     json.RawMessage `json:"id"`
	}
	if len(line) == 0 || json.Unmarshal(line, &w) != nil || (w.Return == nil && w.Error == nil) {
		return reply{}, false
	}
	rep = reply{ret: w.Return, err: w.Error}
	if w.ID != nil {
		if json.Unmarshal(w.ID, &rep.id) != nil {
			rep.id = string(w.ID) // a non-string id: never one of ours
		}
		rep.hasID = true
	}
	return rep, true
}

// decodeReply returns the "return" value of the reply to the command with id, the *qmp.Error of
// an error reply, or errStale for anything else: replies carrying another id, undecodable lines.
// A reply without an id is accepted: the stream was synchronised before the command (the id-less
// parse error the agent answers our 0xFF with comes before the sync delimiter and is skipped),
// and agents older than QEMU 2.12 do not echo ids.
func decodeReply(line []byte, id string) (json.RawMessage, error) {
	rep, ok := parseReply(line)
	if !ok || (rep.hasID && rep.id != id) {
		return nil, errStale
	}
	if rep.err != nil {
		return nil, rep.err
	}
	return rep.ret, nil
}

// readLine reads one line of any length, without its line ending and stray delimiters.
func (a *Agent) readLine() ([]byte, error) {
	for {
		line, err := a.r.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSpace(bytes.TrimLeft(line, "\xff"))
		if len(line) > 0 {
			return line, nil
		}
	}
}

func (a *Agent) write(line []byte) error {
	a.tap(qmp.Sent, qmp.KindCommand, line)
	if _, err := a.conn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write command: %w", err)
	}
	return nil
}

func (a *Agent) tap(dir qmp.Direction, kind string, raw []byte) {
	if a.opts.Tap == nil || len(raw) == 0 {
		return
	}
	a.opts.Tap(qmp.Record{Time: time.Now(), Dir: dir, Kind: kind, Raw: append([]byte(nil), raw...)})
}
