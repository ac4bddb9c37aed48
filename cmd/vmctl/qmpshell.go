package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/term"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// qmpPrompt is the interactive QMP shell's prompt.
const qmpPrompt = "qmp> "

const qmpShellHelp = `Type a QMP command: its name (query-status), a name and its arguments as JSON
(device_del {"id":"disk1"}), or the JSON object ({"execute":"query-status"}). Tab completes
command names (from query-commands), Up/Down walk the history, "exit", Ctrl-D or Ctrl-C leaves
("quit" is QEMU's quit command: it ends the VM).`

// qmpShell is the interactive QMP shell of what: one command per line through q, replies
// pretty-printed. On a terminal it has line editing, history (kept in historyPath unless it
// is "") and tab completion; otherwise it reads commands from stdin, one per line, and fails
// (exit 5) if any reply was a QMP error.
func (c *cli) qmpShell(ctx context.Context, q qmpDoer, what, historyPath string) error {
	names := c.commandNames(ctx, q)
	f, ok := c.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return c.qmpScript(ctx, q)
	}
	old, err := term.MakeRaw(int(f.Fd()))
	if err != nil {
		return fmt.Errorf("set raw terminal: %w", err)
	}
	defer func() { _ = term.Restore(int(f.Fd()), old) }() // best effort on the way out
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{f, c.stdout}, qmpPrompt)
	if w, h, err := term.GetSize(int(f.Fd())); err == nil {
		_ = t.SetSize(w, h)
	}
	h, err := openHistory(historyPath)
	if err != nil {
		fmt.Fprintf(t, "vmctl: history: %v\n", err)
	}
	t.History = h
	t.AutoCompleteCallback = func(line string, pos int, key rune) (string, int, bool) {
		if key != '\t' {
			return "", 0, false
		}
		return complete(t, names, line, pos)
	}
	fmt.Fprintf(t, "QMP shell on %s; %d commands; Tab completes, \"exit\" or Ctrl-D leaves, \"help\" helps\n", what, len(names))
	// ReadLine cannot be interrupted: it runs on its own, and the shell also ends on ^C (ctx)
	// or when the server ends the session, without waiting for a key.
	type read struct {
		line string
		err  error
	}
	lines := make(chan read, 1) // a ReadLine after the end must not block for good
	next := make(chan struct{}, 1)
	go func() {
		for range next {
			line, err := t.ReadLine()
			lines <- read{line, err}
		}
	}()
	defer close(next)
	var ended <-chan struct{}
	if s, ok := q.(interface{ Done() <-chan struct{} }); ok {
		ended = s.Done()
	}
	for {
		next <- struct{}{}
		var r read
		select {
		case r = <-lines:
		case <-ctx.Done():
			fmt.Fprintln(t)
			return nil
		case <-ended:
			fmt.Fprintln(t)
			return fmt.Errorf("qmp session: %w", q.(interface{ Err() error }).Err())
		}
		line, err := r.line, r.err
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(t)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read command: %w", err)
		}
		switch line = strings.TrimSpace(line); line {
		case "":
			continue
		case "exit":
			return nil
		case "help":
			fmt.Fprintln(t, qmpShellHelp)
			continue
		}
		if err := c.shellCommand(ctx, t, q, line); err != nil {
			var closed *subresclient.ClosedError
			if ctx.Err() != nil || errors.As(err, &closed) || errors.Is(err, io.EOF) {
				return err // ^C, or the server ended the session
			}
			fmt.Fprintf(t, "%v\n", explain(err)) // a usage slip, an error reply, a refusal: go on
		}
	}
}

// shellCommand runs one line and prints the reply (an error reply's class and text too).
func (c *cli) shellCommand(ctx context.Context, w io.Writer, q qmpDoer, line string) error {
	command, err := subresclient.ParseCommand(line)
	if err != nil {
		return usageError(err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reply, err := q.Do(ctx, command)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n", pretty(reply))
	return subresclient.CheckReply(reply)
}

// qmpScript runs stdin's lines as commands (not a terminal: a pipe or a file).
func (c *cli) qmpScript(ctx context.Context, q qmpDoer) error {
	var first error
	failed, ran := 0, 0
	in := c.stdin
	if in == nil {
		in = strings.NewReader("")
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if line == "exit" {
			break
		}
		ran++
		err := c.shellCommand(ctx, c.stdout, q, line)
		if err == nil {
			continue
		}
		if !errors.Is(err, subresclient.ErrQMP) {
			return err
		}
		fmt.Fprintf(c.stderr, "vmctl: %s: %v\n", line, err)
		failed++
		if first == nil {
			first = err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read commands: %w", err)
	}
	if first != nil {
		return fmt.Errorf("%d of %d commands got a QMP error reply, the first: %w", failed, ran, first)
	}
	return nil
}

// commandNames asks query-commands for the completion list (empty, with a warning, when it
// fails).
func (c *cli) commandNames(ctx context.Context, q qmpDoer) []string {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reply, err := q.Do(ctx, []byte(`{"execute":"query-commands"}`))
	if err == nil {
		err = subresclient.CheckReply(reply)
	}
	var names []string
	if err == nil {
		names, err = subresclient.CommandNames(reply)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "vmctl: no tab completion: query-commands: %v\n", explain(err))
		return nil
	}
	slices.Sort(names)
	return names
}

// jsonExecute matches a JSON command being typed up to its command name.
var jsonExecute = regexp.MustCompile(`"execute"\s*:\s*"([A-Za-z0-9_-]*)$`)

// complete completes the command name before the cursor: a bare name at the start of the
// line, or the "execute" value of a JSON object. One match is completed (with a space, or the
// closing quote); several are completed to their common prefix, or listed when that adds
// nothing.
func complete(w io.Writer, names []string, line string, pos int) (string, int, bool) {
	before, after := line[:pos], line[pos:]
	var prefix, end string
	if m := jsonExecute.FindStringSubmatch(before); m != nil {
		prefix, end = m[1], `"`
	} else if !strings.ContainsAny(before, " {") {
		prefix, end = before, " "
	} else {
		return line, pos, true
	}
	var match []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			match = append(match, n)
		}
	}
	switch len(match) {
	case 0:
		return line, pos, true
	case 1:
		ins := match[0][len(prefix):] + end
		return before + ins + after, pos + len(ins), true
	}
	common := match[0]
	for _, m := range match[1:] {
		for !strings.HasPrefix(m, common) {
			common = common[:len(common)-1]
		}
	}
	if len(common) > len(prefix) {
		ins := common[len(prefix):]
		return before + ins + after, pos + len(ins), true
	}
	fmt.Fprintln(w, strings.Join(match, "  "))
	return line, pos, true
}

// history is the shell's history: in memory, appended to a file when it has one.
type history struct {
	entries []string // oldest first
	file    *os.File
}

// openHistory loads path's lines ("" or an unreadable file: an empty, in-memory history).
func openHistory(path string) (*history, error) {
	h := &history{}
	if path == "" {
		return h, nil
	}
	if b, err := os.ReadFile(path); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				h.entries = append(h.entries, l)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return h, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return h, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return h, err
	}
	h.file = f
	return h, nil
}

const historyMax = 1000

func (h *history) Add(entry string) {
	if entry = strings.TrimSpace(entry); entry == "" || (len(h.entries) > 0 && h.entries[len(h.entries)-1] == entry) {
		return
	}
	h.entries = append(h.entries, entry)
	if len(h.entries) > historyMax {
		h.entries = h.entries[len(h.entries)-historyMax:]
	}
	if h.file != nil {
		_, _ = fmt.Fprintln(h.file, entry) // a history that cannot be saved still works
	}
}

func (h *history) Len() int { return len(h.entries) }

// At is the idx-th newest entry (0: the last one).
func (h *history) At(idx int) string { return h.entries[len(h.entries)-1-idx] }
