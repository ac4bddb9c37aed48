package local

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// demoDeleteTimeout bounds the wait for a final demo VMI's deletion (the node agent removes its
// finalizer once its node-local state is gone).
const demoDeleteTimeout = 2 * time.Minute

// Demo is what ApplyDemo did.
type Demo struct {
	Key client.ObjectKey
	// Replaced is the final VMI of that name that was deleted and created again; nil if there
	// was none.
	Replaced *vmletv1.VirtualMachineInstance
	// Existing is true when a VMI of that name that was not final was kept as it is (e.g. left
	// running by --keep-vms).
	Existing bool
	// Unserved is the VMI of that name left on a node this run does not have (an earlier run
	// had more nodes): only that node's agent can end or clean it up, so it is left alone and
	// no demo is created; nil otherwise.
	Unserved *vmletv1.VirtualMachineInstance
}

// demoStep is what ApplyDemo does about a VMI of the demo's name, found or not. Pure.
type demoStep int

const (
	demoCreate   demoStep = iota // none: create it
	demoAdopt                    // not final, on one of our nodes: keep it
	demoReplace                  // final, on one of our nodes (or none): delete it, create it again
	demoUnserved                 // on a node this run does not have: leave it, no demo
)

func nextDemoStep(old *vmletv1.VirtualMachineInstance, nodes []string) demoStep {
	switch {
	case old == nil:
		return demoCreate
	case old.Status.NodeName != "" && !slices.Contains(nodes, old.Status.NodeName):
		return demoUnserved
	case !vmistatus.IsFinal(old.Status.Phase) && old.DeletionTimestamp.IsZero():
		return demoAdopt
	default:
		return demoReplace
	}
}

// ApplyDemo creates the demo VMI. One of that name that is not final is kept (the next start
// after `--keep-vms` adopts it); one that is final (its last run ended, e.g. Failed with
// NodeShutdown when vmlet local stopped) is deleted and created again: a VMI is one run.
func (s *Stack) ApplyDemo(ctx context.Context) (Demo, error) {
	vmi, err := readVMI(s.cfg.Demo)
	if err != nil {
		return Demo{}, err
	}
	d := Demo{Key: client.ObjectKeyFromObject(vmi)}
	old := &vmletv1.VirtualMachineInstance{}
	err = s.CP.Client.Get(ctx, d.Key, old)
	switch {
	case apierrors.IsNotFound(err):
		old = nil
	case err != nil:
		return d, fmt.Errorf("get demo VMI: %w", err)
	}
	switch nextDemoStep(old, s.NodeNames()) {
	case demoUnserved:
		d.Unserved = old
		return d, nil
	case demoAdopt:
		d.Existing = true
		return d, nil
	case demoReplace:
		if err := s.deleteAndWait(ctx, old); err != nil {
			return d, err
		}
		d.Replaced = old
	}
	if err := s.CP.Client.Create(ctx, vmi); err != nil {
		return d, fmt.Errorf("create demo VMI: %w", err)
	}
	return d, nil
}

func (s *Stack) deleteAndWait(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	key := client.ObjectKeyFromObject(vmi)
	if err := s.CP.Client.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete final demo VMI: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, demoDeleteTimeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		cur := &vmletv1.VirtualMachineInstance{}
		err := s.CP.Client.Get(ctx, key, cur)
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != vmi.UID) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for final demo VMI %s to be deleted: %w", key, ctx.Err())
		case <-t.C:
		}
	}
}

func readVMI(path string) (*vmletv1.VirtualMachineInstance, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open demo manifest: %w", err)
	}
	defer f.Close()
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(vmi); err != nil {
		return nil, fmt.Errorf("decode demo manifest: %w", err)
	}
	if vmi.Namespace == "" {
		vmi.Namespace = "default"
	}
	return vmi, nil
}
