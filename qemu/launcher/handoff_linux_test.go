package launcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

// TestHandOverTap: tap queue files and a /proc/net/dev opened in the tap's namespace travel
// over the hand-over socket; the launcher takes them (once) for the tap they are attached to
// and reads the tap's counters from the namespace it never entered. A file that is not a queue
// of the named tap, or a wrong count, is refused and nothing is pooled.
func TestHandOverTap(t *testing.T) {
	prereq.Root(t)
	ns, ip := testNetns(t, "vmlet-ho")
	ip("-n", ns, "tuntap", "add", "dev", "mq0", "mode", "tap", "vnet_hdr", "multi_queue")
	nsPath := "/var/run/netns/" + ns

	l := &Launcher{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sock := filepath.Join(t.TempDir(), "taps.sock")
	lis, err := listenTaps(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close(); l.taps.closeAll() })
	go l.serveTaps(lis)

	queues, err := openTap(tapRef{Name: "mq0", NetNS: nsPath, Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFiles(queues)
	counters := openNetDevIn(t, nsPath)
	defer counters.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	plain, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for name, files := range map[string][]*os.File{"not a tap": {plain}, "another tap's name": queues[:1]} {
		tap := "mq0"
		if name == "another tap's name" {
			tap = "other0"
		}
		if err := HandOverTap(ctx, sock, tap, files, nil); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("hand over %s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if _, ok := l.taps.take("mq0", 1); ok {
		t.Fatal("a refused hand-over was pooled")
	}

	if err := HandOverTap(ctx, sock, "mq0", queues, counters); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.taps.take("mq0", 1); ok {
		t.Error("took 1 queue of a 2-queue hand-over")
	}
	got, ok := l.taps.take("mq0", 2)
	if !ok || len(got) != 2 {
		t.Fatalf("take = %d files, %v", len(got), ok)
	}
	for _, f := range got {
		if name, err := tapName(f); err != nil || name != "mq0" {
			t.Errorf("taken file is %q, %v", name, err)
		}
	}
	closeFiles(got)
	if _, ok := l.taps.take("mq0", 2); ok {
		t.Error("queues taken twice")
	}
	if _, ok, err := l.taps.netDev("mq0"); !ok || err != nil {
		t.Errorf("counters of mq0 through the handed file: found %v, %v", ok, err)
	}
	if _, err := tapCounters(tapRef{Name: "mq0"}); err == nil {
		t.Error("mq0 is visible in the test's own namespace: the counters test proves nothing")
	}
}

// openNetDevIn opens /proc/thread-self/net/dev on a thread inside the namespace at path.
func openNetDevIn(t *testing.T, path string) *os.File {
	t.Helper()
	ch := make(chan *os.File, 1)
	errc := make(chan error, 1)
	go func() {
		lockThread()
		if err := enterNetNS(path); err != nil {
			errc <- err
			return
		}
		f, err := os.Open("/proc/thread-self/net/dev")
		if err != nil {
			errc <- err
			return
		}
		ch <- f
	}()
	select {
	case f := <-ch:
		return f
	case err := <-errc:
		t.Fatal(err)
	}
	return nil
}

func lockThread() { runtime.LockOSThread() } // never unlocked: the thread is in another netns
