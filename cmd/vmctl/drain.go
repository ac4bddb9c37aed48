package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// drainTaintKey is the evacuation controller's drain taint (controllers/evacuation.TaintKey,
// repeated so that vmctl does not link the controllers; a test keeps them equal).
const drainTaintKey = "vmlet.dev/drain"

// errBlocked: drain's deadline passed with VMIs still on the node (exit status 4).
var errBlocked = errors.New("blocked")

var vmiResource = vmletv1.GroupVersion.WithResource("virtualmachineinstances")

type drainOptions struct {
	kube     kubeFlags
	deadline time.Duration
	interval time.Duration
}

func newDrainCmd(c *cli) *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain NODE [--deadline 10m]",
		Short: "Taint a node vmlet.dev/drain:NoSchedule and wait until no VMI runs there",
		Long: `Drains a node of its VMIs, in both modes (local mode has no kubelet to evict pods from,
so "kubectl drain" does nothing for VMIs there): it taints the node vmlet.dev/drain:NoSchedule
(needs "update nodes"), then waits until no VMI that has not ended has the node as its
status.nodeName, printing each VMI's state as it changes. The evacuation controller acts on the
taint according to each VMI's evictionStrategy (its own, else the cluster's default in
ConfigMap vmlet-system/vmlet-config, key evictionStrategy, else None):

  LiveMigrate, LiveMigrateIfPossible   migrated to another node (vmlet-evacuation-* migrations)
  LiveMigrate, not migratable          stays: blocks the drain (condition EvacuationBlocked)
  LiveMigrateIfPossible, not migratable  shut down gracefully, ends Failed, reason Evicted
  External                             stays, status.evacuationNodeName set for an external
                                       controller
  None                                 stays: not evacuated (stop or delete it yourself)

No new VMI, and no migration target, is placed on the tainted node until "vmctl uncordon NODE".
At --deadline (0: wait for ever) the VMIs still there are listed with why, and vmctl exits 4;
the taint stays. ^C stops waiting and leaves the taint too.

` + exitCodesHelp,
		Example: `  vmctl drain node-1 --deadline 5m
  vmctl uncordon node-1`,
		Args: exactArgs(1, "one NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.drain(cmd.Context(), o, args[0])
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&o.deadline, "deadline", 10*time.Minute, "give up waiting after this long (0: never)")
	fs.DurationVar(&o.interval, "interval", time.Second, "time between two looks at the node's VMIs")
	o.kube.addFlags(fs)
	return cmd
}

func newUncordonCmd(c *cli) *cobra.Command {
	o := &kubeFlags{}
	cmd := &cobra.Command{
		Use:   "uncordon NODE",
		Short: "Remove the vmlet.dev/drain taint: the node takes VMIs again",
		Long: `Removes every taint with key vmlet.dev/drain from the node (as
"kubectl taint nodes NODE vmlet.dev/drain-"): new VMIs and migration targets may be placed
there again, and drains in progress stop (migrations already created go on).

` + exitCodesHelp,
		Args: exactArgs(1, "one NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.uncordon(cmd.Context(), o, args[0])
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// clients are drain's connections to the API server.
type clients struct {
	nodes      corev1client.NodeInterface
	vmis       dynamic.NamespaceableResourceInterface
	migrations dynamic.NamespaceableResourceInterface
}

func (c *cli) clients(k *kubeFlags) (*clients, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 { // no --request-timeout
		cfg.Timeout = c.timeout
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("core client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return &clients{nodes: core.Nodes(), vmis: dyn.Resource(vmiResource), migrations: dyn.Resource(migrationResource)}, nil
}

// setDrainTaint adds (on) or removes (off) the drain taint and reports whether the node
// changed. Equivalent to: kubectl taint nodes NODE vmlet.dev/drain:NoSchedule (or …-).
func setDrainTaint(ctx context.Context, nodes corev1client.NodeInterface, name string, on bool) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == drainTaintKey })
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == drainTaintKey && t.Effect == corev1.TaintEffectNoSchedule
		})
		if on {
			if has {
				return nil
			}
			now := metav1.Now()
			taints = append(taints, corev1.Taint{Key: drainTaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
		} else if len(taints) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = taints
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("node %s: %w", name, err)
	}
	return changed, nil
}

func (c *cli) uncordon(ctx context.Context, k *kubeFlags, node string) error {
	cl, err := c.clients(k)
	if err != nil {
		return err
	}
	changed, err := setDrainTaint(ctx, cl.nodes, node, false)
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(c.stdout, "node/%s uncordoned (taint %s removed)\n", node, drainTaintKey)
	} else {
		fmt.Fprintf(c.stdout, "node/%s was not drained (no %s taint)\n", node, drainTaintKey)
	}
	return nil
}

func (c *cli) drain(ctx context.Context, o *drainOptions, node string) error {
	if o.deadline < 0 || o.interval <= 0 {
		return usageError("--deadline must be 0 or more and --interval positive")
	}
	cl, err := c.clients(&o.kube)
	if err != nil {
		return err
	}
	changed, err := setDrainTaint(ctx, cl.nodes, node, true)
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(c.stdout, "node/%s tainted %s:NoSchedule\n", node, drainTaintKey)
	} else {
		fmt.Fprintf(c.stdout, "node/%s already tainted %s:NoSchedule\n", node, drainTaintKey)
	}
	start := c.now()
	said := map[string]string{}
	for {
		left, err := vmisOn(ctx, cl.vmis, node)
		if err != nil {
			return err
		}
		for _, s := range left {
			if said[s.key] != s.state {
				fmt.Fprintf(c.stdout, "vmi/%s: %s\n", s.key, s.state)
				said[s.key] = s.state
			}
		}
		if len(left) == 0 {
			fmt.Fprintf(c.stdout, "node/%s drained: no VMI runs there\n", node)
			return nil
		}
		if o.deadline > 0 && c.now().Sub(start) >= o.deadline {
			var b strings.Builder
			fmt.Fprintf(&b, "node %s not drained after %s: %d VMI(s) still there:", node, o.deadline, len(left))
			for _, s := range left {
				fmt.Fprintf(&b, "\n  %s: %s", s.key, s.state)
			}
			return blockedError(b.String())
		}
		if err := c.sleep(ctx, o.interval); err != nil {
			return err
		}
	}
}

// blockedError is errBlocked with the VMIs that stay.
type blockedError string

func (e blockedError) Error() string        { return string(e) }
func (e blockedError) Is(target error) bool { return target == errBlocked }

// vmiState is one VMI left on a drained node and what happens to it.
type vmiState struct{ key, state string }

// vmisOn lists the VMIs that have not ended on node, sorted, each with its state.
func vmisOn(ctx context.Context, vmis dynamic.NamespaceableResourceInterface, node string) ([]vmiState, error) {
	l, err := vmis.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list vmis: %w", err)
	}
	var out []vmiState
	for _, u := range l.Items {
		v, err := fromUnstructured(&u)
		if err != nil {
			return nil, err
		}
		if v.Status.NodeName != node || v.Status.Phase == vmletv1.Succeeded || v.Status.Phase == vmletv1.Failed {
			continue
		}
		out = append(out, vmiState{key: v.Namespace + "/" + v.Name, state: drainState(v)})
	}
	slices.SortFunc(out, func(a, b vmiState) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// drainState says what the drain does to v, from what the evacuation controller and the
// node agents wrote.
func drainState(v *vmletv1.VirtualMachineInstance) string {
	cond := func(t string) *metav1.Condition {
		c := meta.FindStatusCondition(v.Status.Conditions, t)
		if c == nil || c.Status != metav1.ConditionTrue {
			return nil
		}
		return c
	}
	strategy := "unset (the cluster's default)"
	if s := v.Spec.EvictionStrategy; s != nil {
		strategy = string(*s)
	}
	switch {
	case !v.DeletionTimestamp.IsZero():
		return "being deleted"
	case cond(vmletv1.VirtualMachineInstanceEvacuationBlocked) != nil:
		return "BLOCKS the drain: " + cond(vmletv1.VirtualMachineInstanceEvacuationBlocked).Message
	case cond(vmletv1.VirtualMachineInstanceDisruptionTarget) != nil:
		return "shutting down (evicted): " + cond(vmletv1.VirtualMachineInstanceDisruptionTarget).Message
	case v.Status.MigrationState != nil && !v.Status.MigrationState.Completed && !v.Status.MigrationState.Failed && v.Status.MigrationState.TargetNode != "":
		return "migrating to node " + v.Status.MigrationState.TargetNode
	case v.Spec.EvictionStrategy != nil && *v.Spec.EvictionStrategy == vmletv1.EvictionStrategyExternal:
		return "stays: evictionStrategy External (left to an external controller)"
	case v.Status.EvacuationNodeName != "":
		return "to be migrated (evictionStrategy " + strategy + ")"
	case v.Spec.EvictionStrategy != nil && *v.Spec.EvictionStrategy == vmletv1.EvictionStrategyNone:
		return "stays: evictionStrategy None (stop or delete it)"
	case v.Spec.EvictionStrategy != nil:
		return "not marked for evacuation yet (evictionStrategy " + strategy + ")"
	}
	return "not marked for evacuation (evictionStrategy " + strategy + "): not acted on yet, or None, which stays (stop or delete it)"
}
