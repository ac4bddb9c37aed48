package controllers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// launcherClient dials the VMI's launcher (the agent keeps its own connection; the API serves
// several clients). t.Cleanup closes it.
func launcherClient(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) *launcher.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(string(v.UID)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// guestRun runs a shell command in the guest with qemu-guest-agent (GuestExec) and returns its
// trimmed output; a non-zero exit fails the test.
func guestRun(t *testing.T, c *launcher.Client, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 30*time.Second)
	if err != nil {
		t.Fatalf("guest exec %q: %v", cmd, err)
	}
	if r.GetExitCode() != 0 {
		t.Fatalf("guest exec %q: exit %d: %s%s", cmd, r.GetExitCode(), r.GetStdout(), r.GetStderr())
	}
	return strings.TrimSpace(string(r.GetStdout()))
}

// guestDisk is a virtio disk as the guest sees it.
type guestDisk struct {
	dev     string // vda, ...
	sectors int64
}

// guestDisksBySerial maps the serials of the guest's virtio disks to the disks.
func guestDisksBySerial(t *testing.T, c *launcher.Client) map[string]guestDisk {
	t.Helper()
	out := guestRun(t, c, `for d in /sys/block/vd*; do echo "${d##*/} $(cat $d/serial) $(cat $d/size)"; done`)
	m := map[string]guestDisk{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("guest disk size %q: %v", line, err)
		}
		m[f[1]] = guestDisk{dev: f[0], sectors: n}
	}
	return m
}

// qmpBlock is one entry of QMP query-block: a guest device and the image QEMU has open for it.
type qmpBlock struct {
	QDev     string `json:"qdev"`
	Inserted *struct {
		File  string `json:"file"`
		RO    bool   `json:"ro"`
		Drv   string `json:"drv"`
		Image struct {
			Filename     string `json:"filename"`
			Format       string `json:"format"`
			VirtualSize  int64  `json:"virtual-size"`
			BackingImage *struct {
				Filename string `json:"filename"`
			} `json:"backing-image"`
		} `json:"image"`
	} `json:"inserted"`
}

// queryBlock asks QEMU (through the launcher's QMP RPC) which images its disks have open, by
// device id (the qdev path's last element before /virtio-backend).
func queryBlock(t *testing.T, c *launcher.Client) map[string]qmpBlock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reply, err := c.QMP(ctx, `{"execute":"query-block"}`)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Return []qmpBlock       `json:"return"`
		Error  *json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil || r.Error != nil {
		t.Fatalf("query-block: %v: %s", err, reply)
	}
	m := map[string]qmpBlock{}
	for _, b := range r.Return {
		if b.Inserted == nil {
			continue
		}
		p := strings.TrimSuffix(b.QDev, "/virtio-backend")
		m[p[strings.LastIndex(p, "/")+1:]] = b
	}
	return m
}

// volumeStatus returns the VMI's status entry of a volume.
func volumeStatus(v *vmletv1.VirtualMachineInstance, name string) (vmletv1.VolumeStatus, bool) {
	for _, s := range v.Status.VolumeStatus {
		if s.Name == name {
			return s, true
		}
	}
	return vmletv1.VolumeStatus{}, false
}

// waitVolumes waits until every named volume's status has the phase.
func waitVolumes(t *testing.T, key client.ObjectKey, phase vmletv1.VolumePhase, names ...string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	eventually(t, time.Minute, fmt.Sprintf("volumes %v %s", names, phase), func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		got = v
		for _, n := range names {
			if s, ok := volumeStatus(v, n); !ok || s.Phase != phase {
				return false, fmt.Sprintf("%+v", v.Status.VolumeStatus)
			}
		}
		return true, ""
	})
	return got
}

// writeClaim makes a claim folder holding a raw disk.img of size bytes starting with text.
func writeClaim(t testing.TB, dir, text string, size int64) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fileStarts reports whether the file at p starts with text.
func fileStarts(t *testing.T, p, text string) bool {
	t.Helper()
	return readAt(t, p, 0, len(text)) == text
}

// readAt reads n bytes of the file at off.
func readAt(t *testing.T, path string, off int64, n int) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("read %s at %d: %v", path, off, err)
	}
	return string(b)
}

// cachedImages counts the images unpacked in an image cache folder.
func cachedImages(t *testing.T, cache string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(cache, "images"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

var bootDiskOnce struct {
	sync.Once
	path, missing string
	err           error
}

// bootDisk builds (once per process, cached across runs) a BIOS-bootable disk of the test guest
// with test/assets/bootdisk/build.sh and returns its qcow2: the stand-in for KubeVirt's bootable
// containerDisks. A missing prerequisite skips the test (fails it under CI).
func bootDisk(t *testing.T) string {
	t.Helper()
	testguest.Assets(t) // the script builds on the guest; build it (or skip) the usual way first
	bootDiskOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(apienv.RepoRoot(), "test/assets/bootdisk/build.sh"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() == 3 {
				bootDiskOnce.missing = strings.TrimSpace(stderr.String())
				return
			}
			bootDiskOnce.err = fmt.Errorf("build boot disk: %w\n%s", err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		bootDiskOnce.path = filepath.Join(lines[len(lines)-1], "boot.qcow2")
	})
	if bootDiskOnce.missing != "" {
		prereq.Missing(t, bootDiskOnce.missing)
	}
	if bootDiskOnce.err != nil {
		t.Fatal(bootDiskOnce.err)
	}
	return bootDiskOnce.path
}

// nodeDir is a fresh folder that, like a node's /var/lib folders, lets the launchers' user
// pass through (t.TempDir's parent is 0700): for host disk roots, claims and image caches.
func nodeDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// bootDiskLayout writes the bootable containerDisk of the test guest (bootDisk) as an OCI
// layout of the test's and returns its reference, for agentOptions.ImageSources.
func bootDiskLayout(t *testing.T) string {
	t.Helper()
	testguest.Assets(t)
	img, err := images.ContainerDisk(bootDisk(t))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := images.WriteLayout(filepath.Join(t.TempDir(), "bootdisk"), img, "test")
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
