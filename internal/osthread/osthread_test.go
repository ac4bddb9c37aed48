package osthread

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/prereq"
)

// The main goroutine keeps the main thread (TestMain runs on it), so the test can call
// offMainThread from the main thread itself: the one case Discarded cannot be steered into.
func init() { runtime.LockOSThread() }

var mainThreadResult struct {
	ranOnMain   bool
	tid         int
	err         error
	netnsBefore string
	netnsAfter  string
}

func TestMain(m *testing.M) {
	if !onMainThread() {
		panic("TestMain is not on the main thread")
	}
	r := &mainThreadResult
	r.netnsBefore, _ = os.Readlink("/proc/thread-self/ns/net")
	if os.Geteuid() == 0 {
		r.err = offMainThread(func() error {
			r.ranOnMain, r.tid = onMainThread(), unix.Gettid()
			return unix.Unshare(unix.CLONE_NEWNET) // this thread only; it is discarded
		})
	}
	r.netnsAfter, _ = os.Readlink("/proc/thread-self/ns/net")
	os.Exit(m.Run())
}

// Called on the main thread, the function runs on another, and the main thread keeps its
// network namespace although the function unshared its own.
func TestMainThreadUntouched(t *testing.T) {
	prereq.Root(t)
	r := mainThreadResult
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ranOnMain || r.tid == os.Getpid() || r.tid == 0 {
		t.Errorf("ran on thread %d (main: %v), want another thread than the main one (%d)", r.tid, r.ranOnMain, os.Getpid())
	}
	if r.netnsBefore == "" || r.netnsAfter != r.netnsBefore {
		t.Errorf("main thread's netns %q before, %q after", r.netnsBefore, r.netnsAfter)
	}
}

// From any goroutine: fn's thread is not reused, so a namespace it entered is never seen by
// the caller's next call.
func TestThreadDiscarded(t *testing.T) {
	prereq.Root(t)
	own, _ := os.Readlink("/proc/thread-self/ns/net")
	var inside string
	err := Discarded(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		inside, _ = os.Readlink("/proc/thread-self/ns/net")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside == own {
		t.Fatalf("unshare left the thread in %s", own)
	}
	for range 50 {
		var got string
		if err := Discarded(func() error { got, _ = os.Readlink("/proc/thread-self/ns/net"); return nil }); err != nil {
			t.Fatal(err)
		}
		if got == inside {
			t.Fatalf("a later call ran in the namespace %s an earlier one entered", inside)
		}
	}
}
