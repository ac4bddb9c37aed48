package qga_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qga/qgatest"
)

func TestRunPollsUntilExited(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	var mu sync.Mutex
	var execArgs json.RawMessage
	polls := 0
	ag.Handle("guest-exec", func(args json.RawMessage) (any, *qgatest.Error) {
		mu.Lock()
		defer mu.Unlock()
		execArgs = args
		return map[string]int{"pid": 4242}, nil
	})
	ag.Handle("guest-exec-status", func(args json.RawMessage) (any, *qgatest.Error) {
		mu.Lock()
		defer mu.Unlock()
		var p struct{ PID int }
		if json.Unmarshal(args, &p) != nil || p.PID != 4242 {
			return nil, &qgatest.Error{Class: "GenericError", Desc: "Invalid parameter 'pid'"}
		}
		if polls++; polls < 4 {
			return map[string]bool{"exited": false}, nil
		}
		return map[string]any{
			"exited": true, "exitcode": 3,
			"out-data": base64.StdEncoding.EncodeToString([]byte("6.1.0-28-cloud-amd64\n")),
			"err-data": base64.StdEncoding.EncodeToString([]byte("warn\n")),
		}, nil
	})
	a := connect(t, ag, qga.Options{})

	st, err := a.Run(ctxT(t, 10*time.Second), "/bin/uname", "-r")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !st.Exited || st.ExitCode != 3 || string(st.Stdout) != "6.1.0-28-cloud-amd64\n" || string(st.Stderr) != "warn\n" {
		t.Fatalf("Run = %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if polls != 4 {
		t.Errorf("polled %d times, want 4", polls)
	}
	var req struct {
		Path    string   `json:"path"`
		Arg     []string `json:"arg"`
		Capture bool     `json:"capture-output"`
		Input   *string  `json:"input-data"`
	}
	if err := json.Unmarshal(execArgs, &req); err != nil || req.Path != "/bin/uname" || len(req.Arg) != 1 || req.Arg[0] != "-r" || !req.Capture || req.Input != nil {
		t.Errorf("guest-exec arguments = %s", execArgs)
	}
}

func TestExecInputAndRunTimeout(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	var input []byte
	ag.Handle("guest-exec", func(args json.RawMessage) (any, *qgatest.Error) {
		var p struct {
			InputData string `json:"input-data"`
		}
		_ = json.Unmarshal(args, &p)
		input, _ = base64.StdEncoding.DecodeString(p.InputData)
		return map[string]int{"pid": 7}, nil
	})
	ag.Handle("guest-exec-status", func(json.RawMessage) (any, *qgatest.Error) {
		return map[string]bool{"exited": false}, nil // never exits
	})
	a := connect(t, ag, qga.Options{})
	pid, err := a.Exec(ctxT(t, 5*time.Second), "/bin/cat", nil, []byte("stdin data"))
	if err != nil || pid != 7 || string(input) != "stdin data" {
		t.Fatalf("Exec = %d, %v; agent got input %q", pid, err, input)
	}
	// The agent answers every poll: the process outliving the wait is not an agent timeout.
	_, err = a.Run(ctxT(t, 100*time.Millisecond), "/bin/sleep", "1000")
	if !errors.Is(err, qga.ErrStillRunning) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, qga.ErrTimeout) {
		t.Fatalf("Run of a process that never exits = %v, want ErrStillRunning (context.DeadlineExceeded), not ErrTimeout", err)
	}
}

func TestShutdownOutcomes(t *testing.T) {
	t.Run("accepted: no reply, then the ping answers", func(t *testing.T) {
		ag := fakeAgent(t, qgatest.Options{}) // default guest-shutdown: no reply, like qemu-ga
		a := connect(t, ag, qga.Options{})
		if err := a.Shutdown(ctxT(t, 5*time.Second), ""); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		reqs := ag.Requests()
		if got := strings.Join(names(reqs), ","); got != "guest-sync-delimited,guest-shutdown,guest-ping" {
			t.Fatalf("requests = %s", got)
		}
		if string(reqs[1].Args) != `{"mode":"powerdown"}` {
			t.Errorf("guest-shutdown arguments = %s, want mode powerdown", reqs[1].Args)
		}
		if err := a.Ping(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("Ping after Shutdown: %v", err)
		}
		if n := len(ag.Requests()); n != 4 {
			t.Errorf("%d requests; want no resync after a confirmed Shutdown", n)
		}
	})
	t.Run("refused: the error reply is returned", func(t *testing.T) {
		ag := fakeAgent(t, qgatest.Options{})
		ag.Handle("guest-shutdown", func(json.RawMessage) (any, *qgatest.Error) {
			return nil, &qgatest.Error{Class: "GenericError", Desc: "child process has failed to shutdown"}
		})
		ag.Handle("guest-get-osinfo", func(json.RawMessage) (any, *qgatest.Error) {
			return map[string]string{"id": "debian"}, nil
		})
		a := connect(t, ag, qga.Options{})
		var qe *qga.Error
		if err := a.Shutdown(ctxT(t, 5*time.Second), "reboot"); !errors.As(err, &qe) || qe.Class != "GenericError" {
			t.Fatalf("Shutdown refused by the agent = %v, want GenericError", err)
		}
		// The ping's reply is still in the stream; the next request must not take it.
		os, err := a.OSInfo(ctxT(t, 5*time.Second))
		if err != nil || os.ID != "debian" {
			t.Fatalf("OSInfo after a refused Shutdown = %+v, %v", os, err)
		}
	})
	t.Run("guest gone: QEMU closes the socket", func(t *testing.T) {
		ag := fakeAgent(t, qgatest.Options{})
		ag.Handle("guest-shutdown", func(json.RawMessage) (any, *qgatest.Error) {
			_ = ag.CloseConn()
			return qgatest.NoReply, nil
		})
		a := connect(t, ag, qga.Options{})
		if err := a.Shutdown(ctxT(t, 5*time.Second), "halt"); err != nil {
			t.Fatalf("Shutdown ending in EOF = %v, want nil", err)
		}
		if err := a.Ping(ctxT(t, 5*time.Second)); !errors.Is(err, qga.ErrDisconnected) {
			t.Fatalf("Ping after the guest went = %v, want ErrDisconnected", err)
		}
	})
	t.Run("bad mode", func(t *testing.T) {
		a := connect(t, fakeAgent(t, qgatest.Options{}), qga.Options{})
		if err := a.Shutdown(ctxT(t, 5*time.Second), "explode"); !errors.Is(err, qga.ErrBadMode) {
			t.Fatalf("Shutdown(explode) = %v, want ErrBadMode", err)
		}
	})
}

// Replies as qemu-ga 7.2 sends them (captured from the test guest), decoded by the wrappers.
func TestDecodeRealReplies(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	raw := func(s string) qgatest.Handler {
		return func(json.RawMessage) (any, *qgatest.Error) { return json.RawMessage(s), nil }
	}
	ag.Handle("guest-get-osinfo", raw(`{"machine": "x86_64", "kernel-release": "6.1.0-28-cloud-amd64", "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)"}`))
	ag.Handle("guest-network-get-interfaces", raw(`[{"name": "lo", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}], "statistics": {"tx-packets": 2, "tx-errs": 0, "rx-bytes": 140, "rx-dropped": 0, "rx-packets": 2, "rx-errs": 0, "tx-bytes": 140, "tx-dropped": 0}, "hardware-address": "00:00:00:00:00:00"}]`))
	ag.Handle("guest-get-fsinfo", raw(`[{"name": "vda", "total-bytes": 62701568, "mountpoint": "/mnt", "disk": [{"serial": "x1", "bus-type": "virtio", "bus": 0, "unit": 0, "pci-controller": {"bus": 3, "slot": 0, "domain": 0, "function": 0}, "dev": "/dev/vda", "target": 0}], "used-bytes": 14336, "type": "ext4"}]`))
	ag.Handle("guest-get-users", raw(`[]`))
	a := connect(t, ag, qga.Options{})
	ctx := ctxT(t, 10*time.Second)

	os, err := a.OSInfo(ctx)
	if err != nil || os.KernelRelease != "6.1.0-28-cloud-amd64" || os.Machine != "x86_64" || os.ID != "" {
		t.Errorf("OSInfo = %+v, %v", os, err)
	}
	ifs, err := a.NetworkInterfaces(ctx)
	if err != nil || len(ifs) != 1 || ifs[0].IPAddresses[0].Address != "127.0.0.1" || ifs[0].IPAddresses[0].Prefix != 8 || ifs[0].Statistics.RxBytes != 140 {
		t.Errorf("NetworkInterfaces = %+v, %v", ifs, err)
	}
	fs, err := a.FSInfo(ctx)
	if err != nil || len(fs) != 1 || *fs[0].TotalBytes != 62701568 || fs[0].Disks[0].Dev != "/dev/vda" || fs[0].Disks[0].BusType != "virtio" {
		t.Errorf("FSInfo = %+v, %v", fs, err)
	}
	us, err := a.Users(ctx)
	if err != nil || len(us) != 0 {
		t.Errorf("Users = %+v, %v", us, err)
	}
}
