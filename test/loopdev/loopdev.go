package loopdev

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/prereq"
)

// Attach writes the file img, size bytes that start with label, attaches it to a free loop
// device and returns the device's path. The test's cleanup detaches it and restores the
// device node's owner and mode.
//
// Equivalent to: losetup --find --show IMG; later chown/chmod back and losetup -d DEV.
func Attach(t testing.TB, img, label string, size int64) string {
	t.Helper()
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(label); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		prereq.Missing(t, "losetup: "+strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		_ = exec.Command("losetup", "-d", dev).Run()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Logf("losetup -d %s: %v: %s", dev, err, out)
		}
		if err := os.Chown(dev, int(st.Uid), int(st.Gid)); err != nil {
			t.Errorf("restore %s: %v", dev, err)
		}
		if err := os.Chmod(dev, os.FileMode(st.Mode&0o777)); err != nil {
			t.Errorf("restore %s: %v", dev, err)
		}
	})
	return dev
}

// Numbers returns the major and minor numbers of the device node at path.
func Numbers(t testing.TB, path string) (major, minor int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
}
