package poll

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Interval is how often Until checks.
const Interval = 50 * time.Millisecond

// Until checks cond every Interval until it holds or d passes, then fails the test with what
// and the last thing cond saw.
func Until(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s; last seen: %s", what, d, seen)
		}
		<-tick.C
	}
}

// Alive reports whether process pid exists and is not a zombie (an orphan is reparented to
// PID 1, which may be slow to reap it; a zombie runs nothing).
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Tail is the last n bytes of s, marked as cut when it is.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
