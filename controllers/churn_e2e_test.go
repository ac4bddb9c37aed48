package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/figure"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// churnImage is the containerDisk the churn's VMIs may carry (the test guest's data disk).
const churnImage = "vmlet.dev/churn-data:v1"

// Churn sizes: VMLET_CHURN_CYCLES overrides (make soak: 2,000), VMLET_CHURN_SEED replays a run.
const (
	churnCycles  = 200
	churnWorkers = 2 // VMIs in flight at once: two TCG guests keep a 2-core machine's deadlines
)

// TestNodeChurn: create/delete cycles of small VMIs, each with a random (seeded) mix of volumes
// (containerDisk, emptyDisk, cloudInitNoCloud, hostDisk) and a binding (masquerade, bridge,
// none), some deleted while starting. Every cycle ends with the VMI gone; at the end nothing any
// of them made is left on the node, each kind counted (test/leakaudit).
func TestNodeChurn(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	cycles := envInt(t, "VMLET_CHURN_CYCLES", churnCycles)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("VMLET_CHURN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("VMLET_CHURN_SEED: %v", err)
		}
		seed = v
	}
	figure.Report(t, "churn: seed %d (VMLET_CHURN_SEED=%d replays it), %d cycles", seed, seed, cycles)
	files := testguest.Assets(t)
	img, err := images.ContainerDisk(files.DataDisk)
	if err != nil {
		t.Fatal(err)
	}
	dataRef, err := images.WriteLayout(filepath.Join(t.TempDir(), "churn-data"), img, "test")
	if err != nil {
		t.Fatal(err)
	}
	hostRoot := nodeDir(t)
	a := startAgent(t, agentOptions{ImageSources: map[string]string{churnImage: dataRef}, HostDiskRoot: hostRoot})
	defer a.stop(t)
	before := auditNode(t, hostRoot)

	start := time.Now()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	plans := make([]churnPlan, cycles)
	for i := range plans {
		plans[i] = newChurnPlan(rng, i, hostRoot)
	}
	var next, early, failed atomic.Int64
	var wg sync.WaitGroup
	for range churnWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(plans) || failed.Load() > 0 {
					return
				}
				if err := plans[i].run(); err != nil {
					failed.Add(1)
					t.Errorf("cycle %d (%s): %v", i, plans[i], err)
					return
				}
				if plans[i].deleteAt != deleteWhenReady {
					early.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	rep := before.Settle(time.Minute)
	figure.Report(t, "churn: %d cycles (seed %d), %d deleted while starting, %s, leaks: %s",
		cycles, seed, early.Load(), time.Since(start).Round(time.Second), rep)
	if rep.Total() > 0 {
		t.Errorf("churn left objects on the node:\n%s", rep.Detail())
	}
}

// churnPlan is one cycle: a VMI and when to delete it.
type churnPlan struct {
	vmi      *vmletv1.VirtualMachineInstance
	binding  string
	volumes  []string
	hostDisk string // the hostDisk's file (the user's: removed after the VMI)
	// deleteAt is the point of the start at which the VMI is deleted.
	deleteAt deletePoint
}

func (p churnPlan) String() string {
	when := "after Ready"
	if p.deleteAt != deleteWhenReady {
		when = "while starting (" + p.deleteAt.String() + ")"
	}
	return fmt.Sprintf("%s: %s binding, volumes [%s], deleted %s", p.vmi.Name, p.binding, strings.Join(p.volumes, " "), when)
}

func newChurnPlan(rng *rand.Rand, i int, hostRoot string) churnPlan {
	vmi := newVMI(fmt.Sprintf("churn-%03d", i))
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	p := churnPlan{vmi: vmi, deleteAt: deleteWhenReady}
	add := func(name string, src vmletv1.VolumeSource) {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, vmletv1.Volume{Name: name, VolumeSource: src})
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: name})
		p.volumes = append(p.volumes, name)
	}
	if rng.IntN(2) == 0 {
		add("containerdisk", vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: churnImage}})
	}
	if rng.IntN(2) == 0 {
		add("emptydisk", vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}})
	}
	if rng.IntN(2) == 0 {
		add("cloudinit", vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
			CloudInitData: vmletv1.CloudInitData{UserData: fmt.Sprintf("#cloud-config\n# churn %d\n", i)}}})
	}
	if rng.IntN(2) == 0 {
		p.hostDisk = filepath.Join(hostRoot, fmt.Sprintf("churn-%03d.img", i))
		add("hostdisk", vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{
			Path: p.hostDisk, Type: vmletv1.HostDiskExistsOrCreate, Capacity: resource.MustParse("8Mi")}})
	}
	switch rng.IntN(3) {
	case 0:
		p.binding = "masquerade"
		vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
		vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	case 1:
		p.binding = "bridge"
		vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}}}
		vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	default:
		p.binding = "none"
		vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	}
	if rng.IntN(10) < 3 {
		p.deleteAt = deletePoint(rng.IntN(int(deleteWhenReady)))
	}
	return p
}

// run creates the VMI, deletes it once Ready (or while it starts) and waits until it is gone.
// It runs on a worker goroutine: errors, not t.Fatal.
func (p churnPlan) run() error {
	ctx := context.Background()
	vmi := p.vmi.DeepCopy()
	if err := env.Client.Create(ctx, vmi); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	key := client.ObjectKeyFromObject(vmi)
	if p.deleteAt != deleteWhenReady {
		// The fault: a delete at a point of the start, seen in the VMI's status.
		if err := pollErr(3*time.Minute, func() (bool, string, error) {
			v, err := getVMIErr(key)
			if err != nil {
				return false, "", err
			}
			return p.deleteAt.reached(v), summary(v), nil
		}); err != nil {
			return fmt.Errorf("%s: %w", p.deleteAt, err)
		}
	} else if err := pollErr(3*time.Minute, func() (bool, string, error) {
		v, err := getVMIErr(key)
		if err != nil {
			return false, "", err
		}
		if v.Status.Phase == vmletv1.Failed {
			return false, "", fmt.Errorf("failed: %s", summary(v))
		}
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady), summary(v), nil
	}); err != nil {
		return fmt.Errorf("ready: %w", err)
	}
	if err := env.Client.Delete(ctx, vmi); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if err := pollErr(3*time.Minute, func() (bool, string, error) {
		v, err := getVMIErr(key)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, summary(v), nil
	}); err != nil {
		return fmt.Errorf("deleted: %w", err)
	}
	if p.hostDisk != "" {
		// The user's disk outlives the VMI by design; the owner removes it.
		if err := os.Remove(p.hostDisk); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func getVMIErr(key client.ObjectKey) (*vmletv1.VirtualMachineInstance, error) {
	v := &vmletv1.VirtualMachineInstance{}
	return v, env.Client.Get(context.Background(), key, v)
}

// pollErr is eventually for goroutines: cond until it holds, fails or d passes.
func pollErr(d time.Duration, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, seen, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		last = seen
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %s; last seen: %s", d, last)
		}
		<-tick.C
	}
}

func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// deletePoint is where in a VMI's start the churn deletes it.
type deletePoint int

const (
	deleteAtCreate    deletePoint = iota // right after the create
	deleteAtScheduled                    // once the VMI is on the node
	deleteAtPreparing                    // once the agent works on it (a Ready or Synchronized condition)
	deleteWhenReady                      // once Ready: a complete start
)

func (d deletePoint) String() string {
	return [...]string{"at create", "once scheduled", "while preparing", "once ready"}[d]
}

// reached reports whether v's start got to d.
func (d deletePoint) reached(v *vmletv1.VirtualMachineInstance) bool {
	switch d {
	case deleteAtCreate:
		return true
	case deleteAtScheduled:
		return v.Status.NodeName != ""
	case deleteAtPreparing:
		return len(v.Status.Conditions) > 0
	}
	return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
}
