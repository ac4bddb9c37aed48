package realclustere2e_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
)

// Deadlines: TCG boots on 2 busy cores, several VMs at once.
const (
	runningTimeout = 4 * time.Minute
	bootTimeout    = 4 * time.Minute
	goneTimeout    = 2 * time.Minute
)

// kubectl runs kubectl against the cluster with stdin; it fails the test on an error.
func kubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cl.KubectlPath, append([]string{"--kubeconfig", cl.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func suffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createVMI creates a VMI from a manifest's spec (indented two spaces, under "spec:") with
// kubectl, as a user would, and returns it as the API stored it.
func createVMI(t testing.TB, name, spec string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	manifest := "apiVersion: vmlet.dev/v1alpha1\nkind: VirtualMachineInstance\nmetadata:\n  name: " + name +
		"\n  namespace: default\n" + spec
	kubectl(t, manifest, "create", "-f", "-")
	t.Cleanup(func() {
		// A failed test leaves no VMI behind for the next ones (teardown checks the node).
		_ = kc.Delete(context.Background(), &vmletv1.VirtualMachineInstance{ObjectMeta: objMeta(name)})
	})
	return getVMI(t, name)
}

func getVMI(t testing.TB, name string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var vmi vmletv1.VirtualMachineInstance
	if err := kc.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &vmi); err != nil {
		t.Fatal(err)
	}
	vmiNames.Store(string(vmi.UID), vmi.Name)
	return &vmi
}

// vmiNames maps the UIDs of the VMIs the tests read to their names (teardown names leftovers).
var vmiNames sync.Map

// waitVMI waits until cond holds for the VMI and returns it.
func waitVMI(t testing.TB, name string, d time.Duration, what string, cond func(*vmletv1.VirtualMachineInstance) bool) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var vmi vmletv1.VirtualMachineInstance
	poll.Until(t, d, name+": "+what, func() (bool, string) {
		if err := kc.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &vmi); err != nil {
			return false, err.Error()
		}
		return cond(&vmi), summary(&vmi)
	})
	return &vmi
}

func summary(vmi *vmletv1.VirtualMachineInstance) string {
	s := fmt.Sprintf("phase %s reason %q node %q", vmi.Status.Phase, vmi.Status.Reason, vmi.Status.NodeName)
	for _, c := range vmi.Status.Conditions {
		s += fmt.Sprintf("; %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return s
}

func conditionTrue(vmi *vmletv1.VirtualMachineInstance, typ string) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}

// waitBooted waits until the VMI runs and its guest agent answers (the guest booted).
func waitBooted(t testing.TB, name string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	waitVMI(t, name, runningTimeout, "Running", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Running })
	return waitVMI(t, name, bootTimeout, "guest booted (AgentConnected)", func(v *vmletv1.VirtualMachineInstance) bool {
		return conditionTrue(v, vmletv1.VirtualMachineInstanceAgentConnected)
	})
}

// launcherPod is the VMI's launcher pod (nil when there is none).
func launcherPod(t testing.TB, vmi *vmletv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := kc.List(context.Background(), &l, client.InNamespace(vmi.Namespace), launcherpod.MatchingVMI(vmi.UID)); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) == 0 {
		return nil
	}
	return &l.Items[0]
}

func objMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "default", Name: name}
}

// deleteVMI deletes the VMI with kubectl and waits until it is gone.
func deleteVMI(t testing.TB, name string) {
	t.Helper()
	kubectl(t, "", "delete", "vmi", name, "-n", "default", "--wait", "--timeout=3m")
	poll.Until(t, goneTimeout, name+" deleted", func() (bool, string) {
		var vmi vmletv1.VirtualMachineInstance
		err := kc.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &vmi)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// footprint is what a running VMI holds on the node, read as root.
type footprint struct {
	uid            string
	podUID         string
	qemuPid        int
	qemuStart      string
	runDir, volDir string
	cgroups        []string // the pod's cgroup folders (unified and the v1 memory hierarchy)
	netns          string   // QEMU's network namespace ("net:[inode]")
	progs          []uint32 // device programs attached to the launcher container's cgroup
}

// nodeFootprint checks where the VMI runs on its pod's node and returns it (its folders where
// they are on this machine: realcluster.Node.HostPath): QEMU (status.launcher.pid,
// in the agent's PID namespace) is qemu-system-x86_64, in the launcher pod's cgroup, in the pod's
// network namespace (not the host's), with vmlet's device program on its container's cgroup.
func nodeFootprint(t testing.TB, vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod) footprint {
	t.Helper()
	n := node(t, pod.Spec.NodeName)
	fp := footprint{uid: string(vmi.UID), podUID: string(pod.UID),
		runDir: launcherpod.HostRunDir(n.HostPath(launcherRoot), vmi.UID), volDir: launcherpod.HostVolumeDir(n.HostPath(volumeRoot), vmi.UID)}
	if vmi.Status.Launcher == nil || vmi.Status.Launcher.PID == 0 {
		t.Fatalf("no status.launcher.pid: %s", summary(vmi))
	}
	fp.qemuPid = int(vmi.Status.Launcher.PID)
	proc := "/proc/" + strconv.Itoa(fp.qemuPid)
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), "qemu-system-x86_64") {
		t.Fatalf("status.launcher.pid %d is not QEMU on the node: %q (%v)", fp.qemuPid, strings.ReplaceAll(string(cmdline), "\x00", " "), err)
	}
	fp.qemuStart = statStart(t, fp.qemuPid)
	cg, err := os.ReadFile(proc + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	podDir := "pod" + fp.podUID
	var unified string
	for _, l := range strings.Split(string(cg), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || f[0] != "0" && !strings.Contains(f[1], "memory") {
			continue
		}
		if !strings.Contains(f[2], "/"+podDir+"/") {
			t.Fatalf("QEMU's cgroup %q is not in the launcher pod's (%s)", l, podDir)
		}
		mount := "/sys/fs/cgroup/unified"
		if f[0] != "0" {
			mount = "/sys/fs/cgroup/memory"
		} else {
			unified = filepath.Join(mount, f[2])
		}
		fp.cgroups = append(fp.cgroups, filepath.Join(mount, f[2][:strings.Index(f[2], "/"+podDir+"/")+len(podDir)+1]))
	}
	if unified == "" || len(fp.cgroups) != 2 {
		t.Fatalf("QEMU's cgroups %q: want a unified and a memory entry in the pod's", cg)
	}
	fp.progs = devicePrograms(t, unified)
	if len(fp.progs) == 0 {
		t.Errorf("no device program on the launcher container's cgroup %s", unified)
	}
	if fp.netns, err = os.Readlink(proc + "/ns/net"); err != nil {
		t.Fatal(err)
	}
	if host, _ := os.Readlink("/proc/1/ns/net"); host == fp.netns {
		t.Errorf("QEMU runs in the host's network namespace")
	}
	for _, d := range []string{fp.runDir, fp.volDir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the VMI's folder: %v", err)
		}
	}
	return fp
}

// assertGone waits until nothing of fp is left on the node: QEMU, the folders, the pod's cgroups,
// the device programs, the network namespace (no process in it, no mount of it) and every mount
// below the VMI's folders.
func assertGone(t testing.TB, fp footprint) {
	t.Helper()
	poll.Until(t, goneTimeout, "the VMI's node objects gone", func() (bool, string) {
		var left []string
		if st, err := readStart(fp.qemuPid); err == nil && st == fp.qemuStart {
			left = append(left, fmt.Sprintf("QEMU %d", fp.qemuPid))
		}
		for _, d := range append([]string{fp.runDir, fp.volDir}, fp.cgroups...) {
			if _, err := os.Stat(d); err == nil {
				left = append(left, d)
			}
		}
		for _, id := range fp.progs {
			if programExists(id) {
				left = append(left, fmt.Sprintf("bpf program %d", id))
			}
		}
		if holders := netnsHolders(fp.netns); len(holders) > 0 {
			left = append(left, fp.netns+" held by "+strings.Join(holders, ","))
		}
		left = append(left, mountsBelow(fp.runDir, fp.volDir)...)
		return len(left) == 0, strings.Join(left, "; ")
	})
}

func statStart(t testing.TB, pid int) string {
	t.Helper()
	s, err := readStart(pid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readStart is field 22 of /proc/<pid>/stat (start time), which with the PID names a process.
func readStart(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" {
		return "", fmt.Errorf("process %d ended", pid)
	}
	return f[19], nil
}

// netnsHolders lists the processes in, and the mounts of, network namespace ns ("net:[N]").
func netnsHolders(ns string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		if l, err := os.Readlink(p); err == nil && l == ns {
			pid := strings.Split(p, "/")[2]
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
			out = append(out, fmt.Sprintf("%s (%q, cgroups %q)", pid, strings.ReplaceAll(string(cmd), "\x00", " "), strings.Fields(string(cg))))
		}
	}
	// Pins in any mount namespace (the agent pod's is its own): one reader per namespace.
	seen := map[string]bool{}
	for _, p := range procs {
		pid := strings.Split(p, "/")[2]
		mnt, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || seen[mnt] {
			continue
		}
		seen[mnt] = true
		f, err := os.Open("/proc/" + pid + "/mountinfo")
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fs := strings.Fields(s.Text())
			if len(fs) > 4 && fs[3] == ns {
				out = append(out, "mount "+fs[4]+" (in the mount namespace of "+pid+")")
			}
		}
		f.Close()
	}
	return out
}

// mountsBelow lists the mount points below the folders (this process's mount namespace: the
// host's).
func mountsBelow(dirs ...string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 5 {
			continue
		}
		for _, d := range dirs {
			if fs[4] == d || strings.HasPrefix(fs[4], d+"/") {
				out = append(out, fs[4])
			}
		}
	}
	return out
}

// console attaches to the guest's serial console (the launcher's console.sock in its run
// folder, a hostPath on the node) and returns it with a function that types a line.
func console(t testing.TB, fp footprint) (*testguest.Console, func(string)) {
	t.Helper()
	conn, err := net.Dial("unix", filepath.Join(fp.runDir, "sockets", "console.sock"))
	if err != nil {
		t.Fatalf("attach the serial console: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := testguest.NewConsole(conn)
	return c, func(line string) {
		if _, err := conn.Write([]byte(line + "\n")); err != nil {
			t.Fatalf("type on the console: %v", err)
		}
	}
}

// run types a shell command on the console and waits for its marker: the command's output
// ends with "<marker>-<exit status>-END". It returns the exit status.
func run(t testing.TB, c *testguest.Console, typ func(string), cmd string, d time.Duration) int {
	t.Helper()
	m := "DONE-" + suffix()
	done := regexp.MustCompile(m + `-([0-9]+)-END`) // the echo of the typed line holds "$?"
	from := c.Len()
	typ(cmd + "; echo " + m + "-$?-END")
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		seen := c.Len() // before reading: a line that ends later wakes the wait below
		if g := done.FindStringSubmatch(c.String()[from:]); g != nil {
			n, _ := strconv.Atoi(g[1])
			return n
		}
		if _, err := c.WaitFrom(ctx, seen, "\n"); err != nil {
			t.Fatalf("%q: %v; console: %s", cmd, err, poll.Tail(c.String(), 2000))
		}
	}
}

// waitSerial waits until the guest's serial log (logs/serial.log in the launcher's run folder,
// everything since boot) holds marker.
func waitSerial(t testing.TB, fp footprint, marker string) {
	t.Helper()
	path := filepath.Join(fp.runDir, "logs", "serial.log")
	poll.Until(t, bootTimeout, "serial log holds "+marker, func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(b), marker), poll.Tail(string(b), 500)
	})
}
