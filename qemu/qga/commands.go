package qga

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// Ping checks that the agent answers. Equivalent to: {"execute": "guest-ping"}.
func (a *Agent) Ping(ctx context.Context) error {
	return a.Execute(ctx, "guest-ping", nil, nil)
}

// Info returns the agent's version and commands. Equivalent to: {"execute": "guest-info"}.
func (a *Agent) Info(ctx context.Context) (Info, error) {
	var i Info
	err := a.Execute(ctx, "guest-info", nil, &i)
	return i, err
}

// OSInfo describes the guest OS. Equivalent to: {"execute": "guest-get-osinfo"}.
func (a *Agent) OSInfo(ctx context.Context) (OSInfo, error) {
	var o OSInfo
	err := a.Execute(ctx, "guest-get-osinfo", nil, &o)
	return o, err
}

// NetworkInterfaces lists the guest's interfaces and addresses.
// Equivalent to: {"execute": "guest-network-get-interfaces"}.
func (a *Agent) NetworkInterfaces(ctx context.Context) ([]Interface, error) {
	var ifs []Interface
	err := a.Execute(ctx, "guest-network-get-interfaces", nil, &ifs)
	return ifs, err
}

// Users lists logged-in users. Equivalent to: {"execute": "guest-get-users"}.
func (a *Agent) Users(ctx context.Context) ([]User, error) {
	var us []User
	err := a.Execute(ctx, "guest-get-users", nil, &us)
	return us, err
}

// FSInfo lists mounted filesystems. Equivalent to: {"execute": "guest-get-fsinfo"}.
func (a *Agent) FSInfo(ctx context.Context) ([]FS, error) {
	var fs []FS
	err := a.Execute(ctx, "guest-get-fsinfo", nil, &fs)
	return fs, err
}

// Exec starts path with args in the guest, feeding it input on stdin (nil for none) and
// capturing its output, and returns the guest pid for ExecStatus.
// Equivalent to: {"execute": "guest-exec", "arguments": {"path": path, "arg": args,
// "input-data": base64(input), "capture-output": true}}.
func (a *Agent) Exec(ctx context.Context, path string, args []string, input []byte) (int, error) {
	req := struct {
		Path          string   `json:"path"`
		Arg           []string `json:"arg,omitempty"`
		InputData     string   `json:"input-data,omitempty"`
		CaptureOutput bool     `json:"capture-output"`
	}{Path: path, Arg: args, CaptureOutput: true}
	if input != nil {
		req.InputData = base64.StdEncoding.EncodeToString(input)
	}
	var rep struct {
		PID int `json:"pid"`
	}
	if err := a.Execute(ctx, "guest-exec", req, &rep); err != nil {
		return 0, err
	}
	return rep.PID, nil
}

// ExecStatus returns the state of a process started with Exec, with its output decoded once it
// has exited. Equivalent to: {"execute": "guest-exec-status", "arguments": {"pid": pid}}.
func (a *Agent) ExecStatus(ctx context.Context, pid int) (ExecStatus, error) {
	var rep struct {
		Exited       bool   `json:"exited"`
		ExitCode     int    `json:"exitcode"`
		Signal       int    `json:"signal"`
		OutData      string `json:"out-data"`
		ErrData      string `json:"err-data"`
		OutTruncated bool   `json:"out-truncated"`
		ErrTruncated bool   `json:"err-truncated"`
	}
	if err := a.Execute(ctx, "guest-exec-status", map[string]int{"pid": pid}, &rep); err != nil {
		return ExecStatus{}, err
	}
	st := ExecStatus{
		Exited: rep.Exited, ExitCode: rep.ExitCode, Signal: rep.Signal,
		OutTruncated: rep.OutTruncated, ErrTruncated: rep.ErrTruncated,
	}
	var err error
	if st.Stdout, err = base64.StdEncoding.DecodeString(rep.OutData); err != nil {
		return st, fmt.Errorf("decode guest-exec-status out-data: %w", err)
	}
	if st.Stderr, err = base64.StdEncoding.DecodeString(rep.ErrData); err != nil {
		return st, fmt.Errorf("decode guest-exec-status err-data: %w", err)
	}
	return st, nil
}

// Exec polling: guest-exec-status every minPoll at first, doubling up to maxPoll.
const (
	minPoll = 2 * time.Millisecond
	maxPoll = 100 * time.Millisecond
)

// Run runs path with args in the guest and waits for it to exit: Exec, then Wait. A non-zero
// exit code is not an error: check ExecStatus.ExitCode. If ctx ends first Run returns
// ErrStillRunning and the guest process keeps running.
func (a *Agent) Run(ctx context.Context, path string, args ...string) (ExecStatus, error) {
	pid, err := a.Exec(ctx, path, args, nil)
	if err != nil {
		return ExecStatus{}, err
	}
	st, err := a.Wait(ctx, pid)
	if err != nil {
		return st, fmt.Errorf("run %s: %w", path, err)
	}
	return st, nil
}

// Wait waits for the process pid started with Exec to exit and returns its status. qemu-ga
// runs exec'd processes asynchronously and has no exit notification, so Wait polls
// guest-exec-status (every 2 ms at first, backing off to 100 ms). Each poll is a request of its
// own, bounded by the guest-exec-status deadline: the channel is free between polls, so other
// requests (a liveness guest-ping, guest-get-osinfo, ...) are answered while a long process runs.
// A poll that could not be sent (ErrBusy) is retried.
//
// If ctx ends before the process exited, Wait returns ErrStillRunning wrapping ctx's error, and
// the process keeps running in the guest: qemu-ga has no command to kill it. qemu-ga keeps the
// status and captured output of an exited process until a guest-exec-status reads it.
//
// Equivalent to: {"execute": "guest-exec-status", "arguments": {"pid": pid}} until "exited".
func (a *Agent) Wait(ctx context.Context, pid int) (ExecStatus, error) {
	start := time.Now()
	stillRunning := func() error {
		return fmt.Errorf("%w: guest pid %d after %s (%w)", ErrStillRunning, pid,
			time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	interval := minPoll
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ExecStatus{}, stillRunning()
		}
		// A poll, once sent, gets its full command deadline, never the rest of ctx: cut short
		// at ctx's end, a poll that the agent answers in time would look unanswered (a lost
		// agent, a resync). ctx ends the wait between polls; at worst one poll runs past it.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.timeout("guest-exec-status"))
		st, err := a.ExecStatus(pctx, pid)
		cancel()
		if errors.Is(err, ErrBusy) && ctx.Err() != nil {
			// The wait ended during a poll: that is not the agent failing to answer.
			return ExecStatus{}, stillRunning()
		}
		if errors.Is(err, ErrBusy) { // not sent: no news about the process, poll again
			timer.Reset(interval)
			continue
		}
		if err != nil {
			return st, fmt.Errorf("wait for guest pid %d: %w", pid, err)
		}
		if st.Exited {
			return st, nil
		}
		timer.Reset(interval)
		interval = min(2*interval, maxPoll)
	}
}

// Shutdown asks the guest to power down ("powerdown" or ""), "reboot" or "halt", and confirms
// the outcome. qemu-ga sends no reply when guest-shutdown succeeds but does send an error when it
// fails (e.g. the guest has no /sbin/shutdown), so Shutdown follows it with a guest-ping in the
// same exchange: an error reply to guest-shutdown is returned as *Error; the ping's reply, or the
// socket closing because QEMU exited with the powered-off guest, means it went through. If the
// agent goes silent instead (its guest is going down but QEMU lives on), Shutdown returns
// ErrTimeout at ctx's deadline: watch QMP's SHUTDOWN event or QEMU's exit for the outcome.
//
// Equivalent to: {"execute": "guest-shutdown", "arguments": {"mode": mode}} then
// {"execute": "guest-ping"}.
func (a *Agent) Shutdown(ctx context.Context, mode string) error {
	switch mode {
	case "":
		mode = "powerdown"
	case "powerdown", "reboot", "halt":
	default:
		return fmt.Errorf("shut down guest: %w: %q", ErrBadMode, mode)
	}
	args, err := encodeArgs("guest-shutdown", map[string]string{"mode": mode})
	if err != nil {
		return err
	}
	return a.do(ctx, "guest-shutdown", func(ctx context.Context) error {
		if !a.synced {
			if err := a.sync("guest-shutdown"); err != nil {
				return err
			}
		}
		a.synced = false
		shutID, err := a.send("guest-shutdown", args)
		if err != nil {
			return err
		}
		pingID, err := a.send("guest-ping", nil)
		if peerGone(err) {
			a.setBroken(err) // QEMU closed the socket: the guest is off
			return nil
		}
		if err != nil {
			return err
		}
		for {
			line, err := a.readLine()
			if peerGone(err) {
				a.setBroken(err)
				return nil
			}
			if err != nil {
				return fmt.Errorf("read guest-shutdown outcome: %w", err)
			}
			rep, ok := parseReply(line)
			switch {
			case ok && rep.err != nil && (rep.id == shutID || !rep.hasID):
				a.tap(qmp.Received, qmp.KindReply, line)
				return fmt.Errorf("execute guest-shutdown: %w", rep.err)
			case ok && rep.err == nil && (rep.id == pingID || !rep.hasID):
				a.tap(qmp.Received, qmp.KindReply, line)
				a.synced = true
				return nil
			case ok && rep.id == pingID:
				a.tap(qmp.Received, qmp.KindReply, line)
				return fmt.Errorf("confirm guest-shutdown: %w", rep.err)
			case ok && rep.id == shutID: // an agent that answers a successful guest-shutdown
				a.tap(qmp.Received, qmp.KindReply, line)
				continue
			}
			a.tap(qmp.Received, qmp.KindUnknown, line)
		}
	})
}

// peerGone reports whether err means the other end closed the connection.
func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}
