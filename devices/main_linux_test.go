package devices

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the helper processes the kernel tests need, chosen by
// VMLET_DEVICES_CHILD:
//
//   - "serve": a process placed in a filtered cgroup; it reads commands on stdin and answers
//     one line each with the errno (0 for success), so a test can probe the filter before and
//     after a change without restarting it.
//   - "attach": attaches a filter to VMLET_DEVICES_CGROUP with the rules in VMLET_DEVICES_RULES
//     (";"-separated ParseRule strings), grants VMLET_DEVICES_GRANTS, prints the program id
//     and exits: the attaching process is gone when the test recovers the filter.
const childEnv = "VMLET_DEVICES_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

func runChild(mode string) int {
	switch mode {
	case "serve":
		return serve()
	case "attach":
		return attachAndExit()
	}
	fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childEnv, mode)
	return 2
}

// serve answers:
//
//	open <path> r|w|rw       → errno of open(2) (O_NOCTTY|O_NONBLOCK; closed at once)
//	mknod <path> b|c <maj> <min> → errno of mknod(2) (the node is removed again)
//	hammer <allowed> <denied> → "started", then opens both rw in a loop until the next line
//	                            (any), then "<rounds> <refusals of allowed> <non-refusals of denied>"
//	bench <path> <n>         → nanoseconds per open+close of path over n rounds
func serve() int {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		var out string
		switch {
		case len(f) == 3 && f[0] == "open":
			out = errnoString(openDevice(f[1], f[2]))
		case len(f) == 5 && f[0] == "mknod":
			maj, _ := strconv.ParseUint(f[3], 10, 32)
			min, _ := strconv.ParseUint(f[4], 10, 32)
			out = errnoString(mknod(f[1], f[2], uint32(maj), uint32(min)))
		case len(f) == 3 && f[0] == "hammer":
			out = hammer(in, f[1], f[2])
		case len(f) == 3 && f[0] == "bench":
			n, _ := strconv.Atoi(f[2])
			start := time.Now()
			for range n {
				_ = openDevice(f[1], "rw")
			}
			out = strconv.FormatInt(time.Since(start).Nanoseconds()/int64(max(n, 1)), 10)
		default:
			out = "bad command"
		}
		fmt.Println(out)
	}
	return 0
}

// hammer opens allowed and denied until a line arrives on in, counting the opens of allowed
// refused (EPERM) and those of denied not refused.
func hammer(in *bufio.Scanner, allowed, denied string) string {
	var stop atomic.Bool
	done := make(chan string)
	go func() {
		var rounds, badAllowed, badDenied int
		for !stop.Load() {
			rounds++
			// The filter's word is EPERM: a node without a driver (ENODEV) was let through.
			if errors.Is(openDevice(allowed, "rw"), unix.EPERM) {
				badAllowed++
			}
			if !errors.Is(openDevice(denied, "rw"), unix.EPERM) {
				badDenied++
			}
		}
		done <- fmt.Sprintf("%d %d %d", rounds, badAllowed, badDenied)
	}()
	fmt.Println("started")
	in.Scan()
	stop.Store(true)
	return <-done
}

func openDevice(path, mode string) error {
	flags := map[string]int{"r": unix.O_RDONLY, "w": unix.O_WRONLY, "rw": unix.O_RDWR}[mode]
	fd, err := unix.Open(path, flags|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func mknod(path, typ string, major, minor uint32) error {
	mode := uint32(unix.S_IFCHR)
	if typ == "b" {
		mode = unix.S_IFBLK
	}
	if err := unix.Mknod(path, mode|0o600, int(unix.Mkdev(major, minor))); err != nil {
		return err
	}
	return unix.Unlink(path)
}

func errnoString(err error) string {
	var errno unix.Errno
	switch {
	case err == nil:
		return "0"
	case errors.As(err, &errno):
		return strconv.Itoa(int(errno))
	}
	return "-1"
}

func attachAndExit() int {
	parse := func(env string) ([]Rule, error) {
		var rules []Rule
		for s := range strings.SplitSeq(os.Getenv(env), ";") {
			if s == "" {
				continue
			}
			r, err := ParseRule(s)
			if err != nil {
				return nil, err
			}
			rules = append(rules, r)
		}
		return rules, nil
	}
	rules, err := parse("VMLET_DEVICES_RULES")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	grants, err := parse("VMLET_DEVICES_GRANTS")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := Attach(os.Getenv("VMLET_DEVICES_CGROUP"), rules)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, g := range grants {
		if err := f.Grant(g); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	id, err := f.ProgramID()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(id)
	return 0 // exit without Close: the kernel drops our fds, the attachment stays
}
