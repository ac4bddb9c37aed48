package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// stalledLayout is an OCI layout of the test guest whose index.json is a FIFO: a pull of it
// blocks in read(2), beyond any context, until release. It stands for a registry that takes
// minutes per image.
type stalledLayout struct {
	ref   string
	index string // the FIFO
	data  []byte // the real index.json
	fd    int    // the FIFO held open read-write, so that releasing never blocks
}

func newStalledLayout(t *testing.T) *stalledLayout {
	t.Helper()
	ref, err := guestvmi.Layout(testguest.Assets(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimPrefix(ref[:strings.LastIndex(ref, ":")], "oci:")
	s := &stalledLayout{ref: ref, index: filepath.Join(dir, "index.json"), fd: -1}
	if s.data, err = os.ReadFile(s.index); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.index); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(s.index, 0o644); err != nil {
		t.Fatal(err)
	}
	if s.fd, err = unix.Open(s.index, unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.release) // a failed test must not leave the agent's pulls hanging
	return s
}

// release lets the blocked pull (and every later one) read the real index.json: the file
// replaces the FIFO for new opens, and the reader blocked on the FIFO gets the content and
// end of file.
func (s *stalledLayout) release() {
	if s.fd < 0 {
		return
	}
	tmp := s.index + ".tmp"
	if err := os.WriteFile(tmp, s.data, 0o644); err == nil {
		_ = os.Rename(tmp, s.index)
	}
	_, _ = unix.Write(s.fd, s.data)
	_ = unix.Close(s.fd)
	s.fd = -1
}

// TestSlowPullsDoNotHoldOthers: more VMIs than the agent has workers wait for images that do
// not come; another VMI created after them still starts at once, because image pulls run as
// tracked operations and no reconcile waits for one. When the images come, the waiting VMIs
// start too. (Before, each waiting VMI held a worker for its whole pull: the last VMI waited
// for the first pull to end.)
func TestSlowPullsDoNotHoldOthers(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	n := controllers.Workers + 1
	sources := map[string]string{}
	var stalled []*stalledLayout
	for i := range n {
		s := newStalledLayout(t)
		stalled = append(stalled, s)
		sources[fmt.Sprintf("vmlet.test/stalled-%d:latest", i)] = s.ref
	}
	a := startAgent(t, agentOptions{ImageSources: sources, ImageCache: nodeDir(t)})
	defer a.stop(t)
	ctx := context.Background()
	var keys []client.ObjectKey
	for i := range n {
		vmi := guestvmi.VMI(fmt.Sprintf("stalled-%d", i), fmt.Sprintf("vmlet.test/stalled-%d:latest", i))
		if err := env.Client.Create(ctx, vmi); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, client.ObjectKeyFromObject(vmi))
	}
	for _, key := range keys {
		eventually(t, time.Minute, key.Name+" waits for its storage", func() (bool, string) {
			v, err := getVMI(t, key)
			if err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
			return v.Status.Phase == vmletv1.Scheduled && c != nil && c.Reason == "PreparingStorage", summary(v)
		})
	}
	if got := a.r.StorageOperations(); got != n {
		t.Errorf("%d storage operations run, want %d (one per stalled VMI)", got, n)
	}

	fast := newVMI("not-stalled")
	t0 := time.Now()
	if err := env.Client.Create(ctx, fast); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, client.ObjectKeyFromObject(fast), vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, time.Minute)
	t.Logf("%d VMIs stalled on their images, another one Ready in %s", n, time.Since(t0).Round(time.Millisecond))

	for _, s := range stalled {
		s.release()
	}
	for _, key := range keys {
		waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	}
	for _, key := range append(keys, client.ObjectKeyFromObject(fast)) {
		v, err := getVMI(t, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range append(keys, client.ObjectKeyFromObject(fast)) {
		waitDeleted(t, key)
	}
	if got := a.r.StorageOperations(); got != 0 {
		t.Errorf("%d storage operations still run after the VMIs are gone", got)
	}
}
