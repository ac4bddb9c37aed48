package osthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Discarded runs fn on an OS thread that no other goroutine ever uses afterwards (Go ends it
// when fn returns), never on the main thread, and returns fn's error. fn may leave its thread
// in another namespace or with fewer privileges; files and sockets it opens keep working
// everywhere.
func Discarded(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked (but on the main thread): the thread ends with this goroutine
		if onMainThread() {
			errc <- offMainThread(fn)
			runtime.UnlockOSThread()
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// offMainThread runs fn through Discarded while the calling goroutine, locked to the main
// thread, keeps that thread from every other goroutine.
func offMainThread(fn func() error) error { return Discarded(fn) }

func onMainThread() bool { return unix.Gettid() == unix.Getpid() }
