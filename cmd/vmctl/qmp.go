package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vmlet/vmlet/internal/subresclient"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// qmpDoer runs one QMP command object and returns QEMU's reply: the API's qmp subresource
// (POST, or a websocket session) or a launcher's QMP call.
type qmpDoer interface {
	Do(ctx context.Context, command []byte) ([]byte, error)
}

// postQMP is one POST qmp per command.
type postQMP struct{ t *vmTarget }

func (p postQMP) Do(ctx context.Context, command []byte) ([]byte, error) {
	b, err := p.t.sub.QMP(ctx, p.t.vmi, command)
	return b, explain(err)
}

// launcherQMP is the launcher's QMP call (--launcher).
type launcherQMP struct{ c *cli }

func (l launcherQMP) Do(ctx context.Context, command []byte) ([]byte, error) {
	cl, err := l.c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	reply, err := cl.QMP(ctx, string(command))
	return []byte(reply), err
}

// pretty indents a JSON reply (as is when it is not JSON).
func pretty(reply []byte) []byte {
	var b bytes.Buffer
	if json.Indent(&b, bytes.TrimSpace(reply), "", "  ") != nil {
		return reply
	}
	return b.Bytes()
}

// qmpOnce runs one command line (JSON, or a name with optional JSON arguments), prints the
// reply pretty-printed, and fails with the QMP error (exit 5) when the reply is one.
func (c *cli) qmpOnce(ctx context.Context, q qmpDoer, line string) error {
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
	fmt.Fprintf(c.stdout, "%s\n", pretty(reply))
	return subresclient.CheckReply(reply)
}

// vmiQMPLog prints the VMI's QMP log through the qmplog subresource.
func (c *cli) vmiQMPLog(ctx context.Context, t *vmTarget, follow bool, tail int) error {
	if !follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	err := t.sub.QMPLog(ctx, t.vmi, subresclient.QMPLogOptions{Tail: tail, Follow: follow}, func(e subresclient.QMPLogEntry) error {
		return c.printLogEntry(e.Time, e.Origin, e.Caller, e.Direction, e.Text)
	})
	if follow && errors.Is(err, context.Canceled) {
		return nil // ^C
	}
	return explain(err)
}

// printLogEntry is one line of qmp-log: time (UTC), origin, caller, direction, the JSON.
func (c *cli) printLogEntry(t time.Time, origin, caller, direction, text string) error {
	if caller == "" {
		caller = "-"
	}
	_, err := fmt.Fprintf(c.stdout, "%s %-5s %-12s %-5s %s\n", t.UTC().Format("15:04:05.000000"), origin, caller, direction, text)
	return err
}

// launcherQMPLog prints the QMP log from the launcher (--launcher).
func (c *cli) launcherQMPLog(ctx context.Context, follow bool, n int) error {
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	if !follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	err = cl.QMPLog(ctx, n, follow, func(e *pb.QMPLogEntry) error {
		return c.printLogEntry(time.Unix(0, e.GetTimeUnixNano()), e.GetOrigin(), e.GetCaller(), e.GetDirection(), e.GetText())
	})
	if follow && errors.Is(err, context.Canceled) {
		return nil // ^C
	}
	return err
}
