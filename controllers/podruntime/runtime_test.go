package podruntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
)

// The test binary doubles as a launcher that serves a socket: VMLET_PODRT_SERVE=<path>.
func TestMain(m *testing.M) {
	if path := os.Getenv("VMLET_PODRT_SERVE"); path != "" {
		l, err := net.Listen("unix", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
}

func newRuntime(t *testing.T, pods ...*corev1.Pod) *Runtime {
	t.Helper()
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s)
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	return &Runtime{Pods: b.Build(), LauncherRoot: t.TempDir()}
}

func launcherPod(uid string, cs ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vmlet-launcher-" + uid, Labels: map[string]string{launcherpod.LabelVMIUID: uid}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: cs},
	}
}

// serve starts a process serving id's ready socket and returns it.
func serve(t *testing.T, r *Runtime, id string) *exec.Cmd {
	t.Helper()
	if err := os.MkdirAll(r.Dir(id), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "VMLET_PODRT_SERVE="+r.Socket(id))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for r.serving(id) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("helper never served its socket")
		}
		select {
		case <-done:
			t.Fatal("helper exited")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return cmd
}

func TestStateFindsTheServingLauncher(t *testing.T) {
	const id = "uid-1"
	r := newRuntime(t, launcherPod(id))
	if st, err := r.State(id); err != nil || st.Ready || st.Exited != nil {
		t.Fatalf("pod without a socket: %+v, %v; want not ready, running", st, err)
	}
	cmd := serve(t, r, id)
	st, err := r.State(id)
	if err != nil || !st.Ready || st.Pid != cmd.Process.Pid {
		t.Fatalf("serving: %+v, %v; want ready with pid %d (SO_PEERCRED)", st, err, cmd.Process.Pid)
	}
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir left: %v", err)
	}
	if _, err := startTime(cmd.Process.Pid); err == nil {
		t.Error("Remove left the launcher running")
	}
}

func TestStateNotFoundAndVanished(t *testing.T) {
	r := newRuntime(t)
	if _, err := r.State("none"); !errors.Is(err, process.ErrNotFound) {
		t.Fatalf("no pod, no folder: %v, want ErrNotFound", err)
	}
	if err := os.MkdirAll(r.Dir("gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := r.State("gone")
	if err != nil || st.Exited == nil || st.Exited.Known {
		t.Fatalf("folder without pod or launcher: %+v, %v; want an unknown exit", st, err)
	}
}

func TestExitFromContainerStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		term corev1.ContainerStateTerminated
		code int
		sig  string
	}{
		{"completed", corev1.ContainerStateTerminated{ExitCode: 0}, 0, ""},
		{"qemu died", corev1.ContainerStateTerminated{ExitCode: 4}, 4, ""},
		{"killed", corev1.ContainerStateTerminated{ExitCode: 137, Signal: 9}, 137, "SIGKILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, launcherPod("u", corev1.ContainerStatus{Name: "launcher", State: corev1.ContainerState{Terminated: &tc.term}}))
			st, err := r.State("u")
			if err != nil || st.Exited == nil || st.Exited.Code != tc.code || st.Exited.Signal != tc.sig || !st.Exited.Known {
				t.Fatalf("state %+v (exit %+v), %v; want code %d signal %q", st, st.Exited, err, tc.code, tc.sig)
			}
		})
	}
}

func TestCgroupOfSelf(t *testing.T) {
	cg, err := cgroupOf(os.Getpid())
	if err != nil || cg == "" || cg[0] != '/' {
		t.Fatalf("cgroupOf(self) = %q, %v", cg, err)
	}
	if filepath.Clean(cg) != cg {
		t.Errorf("unclean cgroup path %q", cg)
	}
}
