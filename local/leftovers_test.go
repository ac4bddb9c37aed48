package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

var widget = schema.GroupVersionKind{Group: "test.vmlet.dev", Version: "v1", Kind: "Widget"}

func testOptions(t *testing.T) Options {
	t.Helper()
	prereq.APIServer(t)
	assets, err := apienv.ControlPlaneAssets()
	if err != nil {
		t.Fatal(err)
	}
	return Options{StateDir: t.TempDir(), AssetsDir: assets,
		CRDDirs: []string{filepath.Join(apienv.RepoRoot(), "test", "apienv", "testdata")}}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// leftoverEtcd starts etcd on the state folder's data as a killed older vmlet would have left
// it: not our child's child, no parent-death signal. It returns once etcd holds the data.
func leftoverEtcd(t *testing.T, o Options) *exec.Cmd {
	t.Helper()
	dataDir := filepath.Join(o.StateDir, "etcd")
	cport, pport := freePort(t), freePort(t)
	cmd := exec.Command(filepath.Join(o.AssetsDir, "etcd"), "--data-dir="+dataDir,
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", cport), fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", cport),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", pport), "--unsafe-no-fsync=true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	poll.Until(t, time.Minute, "leftover etcd holds the data folder", func() (bool, string) {
		f, err := dataDirLocked(dataDir)
		return f != "", fmt.Sprint(err)
	})
	return cmd
}

func createWidget(t *testing.T, cp *ControlPlane, name string) {
	t.Helper()
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widget)
	w.SetNamespace("default")
	w.SetName(name)
	if err := cp.Client.Create(context.Background(), w); err != nil {
		t.Fatalf("create: %v", err)
	}
}

// TestControlPlaneReclaimsLeftovers: an etcd that a previous instance recorded and left running
// on the state folder (an older vmlet without the parent-death signal, killed) is stopped by
// the next start, which then comes up on the same data instead of waiting on etcd's lock.
func TestControlPlaneReclaimsLeftovers(t *testing.T) {
	o := testOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := StartControlPlane(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	createWidget(t, cp, "before")
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}

	old := leftoverEtcd(t, o)
	r, err := recordOf("etcd", old.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRecords(o.StateDir, []ProcessRecord{r}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cp, err = StartControlPlane(ctx, o)
	if err != nil {
		t.Fatalf("start with a leftover etcd: %v", err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("started over a leftover etcd in %s", time.Since(start))
	if len(cp.Reclaimed) != 1 || cp.Reclaimed[0].Pid != old.Process.Pid {
		t.Errorf("reclaimed %+v, want the leftover etcd %d", cp.Reclaimed, old.Process.Pid)
	}
	if poll.Alive(old.Process.Pid) {
		t.Errorf("leftover etcd %d still runs", old.Process.Pid)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(widget)
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "before"}, got); err != nil {
		t.Errorf("object of the earlier run lost: %v", err)
	}
}

// TestControlPlaneRefusesForeignEtcd: an etcd holding the state folder's data that no vmlet
// recorded is not this vmlet's to stop: the start fails at once, naming it, and leaves it be.
func TestControlPlaneRefusesForeignEtcd(t *testing.T) {
	o := testOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	foreign := leftoverEtcd(t, o)
	start := time.Now()
	cp, err := StartControlPlane(ctx, o)
	if err == nil {
		_ = cp.Stop()
		t.Fatal("started on a data folder another etcd holds")
	}
	took := time.Since(start)
	if !errors.Is(err, ErrDataDirLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", foreign.Process.Pid)) || took > 20*time.Second {
		t.Errorf("err = %v after %s; want ErrDataDirLocked naming pid %d, fast", err, took, foreign.Process.Pid)
	}
	if !poll.Alive(foreign.Process.Pid) {
		t.Errorf("the foreign etcd %d was stopped", foreign.Process.Pid)
	}
}

// TestStateDirLock: a second lock on a state folder fails at once with ErrStateDirInUse and the
// holder's pid; after unlock it can be taken again.
func TestStateDirLock(t *testing.T) {
	dir := t.TempDir()
	l, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStateDir(dir); !errors.Is(err, ErrStateDirInUse) || !strings.Contains(err.Error(), "pid ") {
		t.Errorf("second lock: %v, want ErrStateDirInUse with the pid", err)
	}
	if err := l.unlock(); err != nil {
		t.Fatal(err)
	}
	l, err = lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	_ = l.unlock()
}
