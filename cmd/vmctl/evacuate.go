package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// The evacuation controller's marks on its migrations (controllers/evacuation's
// AnnotationEvacuation and LabelVMIName, repeated as drainTaintKey is; a test keeps them equal).
const (
	evacuationAnnotation = "vmlet.dev/evacuationMigration"
	evacuationLabelVMI   = "vmlet.dev/vmi-name"
)

type evacuateCancelOptions struct {
	kube kubeFlags
	node string
}

func newEvacuateCancelCmd(c *cli) *cobra.Command {
	o := &evacuateCancelOptions{}
	cmd := &cobra.Command{
		Use:   "evacuate-cancel (NAME | --node NODE)",
		Short: "Cancel the evacuation of a VMI, or of every VMI marked to leave a node",
		Long: `Cancels evacuations started by an eviction (kubectl drain through vmlet's eviction webhook,
which marks the VMI with status.evacuationNodeName while the node is cordoned), as
"virtctl evacuate-cancel": clears the VMI's status.evacuationNodeName (needs "update
virtualmachineinstances/status"), then deletes its evacuation migrations that have not ended
(vmlet-evacuation-*; the migration is aborted and the guest stays on its node). With --node,
every VMI marked to leave NODE, in all namespaces.

Stop "kubectl drain" first: its next eviction would mark the VMI again. A node tainted
vmlet.dev/drain (vmctl drain) evacuates every VMI on it whatever their marks: this is refused
(exit 7), "vmctl uncordon NODE" ends that drain.

` + exitCodesHelp,
		Example: `  vmctl evacuate-cancel my-vm -n prod
  vmctl evacuate-cancel --node node-1`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.node == "" && len(args) != 1:
				return usageError("one VMI NAME, or --node NODE")
			case o.node != "" && len(args) != 0:
				return usageError("a VMI NAME or --node NODE, not both")
			}
			return c.evacuateCancel(cmd.Context(), o, args)
		},
	}
	cmd.Flags().StringVar(&o.node, "node", "", "cancel the evacuation of every VMI marked to leave this node")
	o.kube.addFlags(cmd.Flags())
	return cmd
}

func (c *cli) evacuateCancel(ctx context.Context, o *evacuateCancelOptions, args []string) error {
	cl, err := c.clients(&o.kube)
	if err != nil {
		return err
	}
	var vmis []vmletv1.VirtualMachineInstance
	if o.node != "" {
		l, err := cl.vmis.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list VMIs: %w", err)
		}
		for i := range l.Items {
			v, err := fromUnstructured(&l.Items[i])
			if err != nil {
				return err
			}
			if v.Status.EvacuationNodeName == o.node {
				vmis = append(vmis, *v)
			}
		}
		if len(vmis) == 0 {
			fmt.Fprintf(c.stdout, "no VMI is marked to leave node/%s\n", o.node)
			return nil
		}
	} else {
		ns, err := o.kube.namespace()
		if err != nil {
			return err
		}
		u, err := cl.vmis.Namespace(ns).Get(ctx, args[0], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("vmi %s/%s: %w", ns, args[0], errNotFound)
		}
		if err != nil {
			return fmt.Errorf("vmi %s/%s: %w", ns, args[0], err)
		}
		v, err := fromUnstructured(u)
		if err != nil {
			return err
		}
		vmis = append(vmis, *v)
	}
	var errs []error
	drained := map[string]bool{} // node name → carries the drain taint, read once per run
	for i := range vmis {
		if err := c.cancelOne(ctx, cl, &vmis[i], drained); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cancelOne clears vmi's mark, then deletes its evacuation migrations that have not ended (in
// that order: a mark left on a cordoned node would make the controller start another).
// drained caches, per node, whether it carries the drain taint.
func (c *cli) cancelOne(ctx context.Context, cl *clients, vmi *vmletv1.VirtualMachineInstance, drained map[string]bool) error {
	key := vmi.Namespace + "/" + vmi.Name
	for _, n := range []string{vmi.Status.EvacuationNodeName, vmi.Status.NodeName} {
		if n == "" {
			continue
		}
		d, seen := drained[n]
		if !seen {
			node, err := cl.nodes.Get(ctx, n, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("node %s: %w", n, err)
			}
			d = err == nil && slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == drainTaintKey })
			drained[n] = d
		}
		if d {
			return &exitStatusError{code: exitConflict, err: fmt.Errorf("vmi/%s: node %s carries the drain taint %s, which evacuates every VMI there: \"vmctl uncordon %s\" ends that drain", key, n, drainTaintKey, n)}
		}
	}
	marked := vmi.Status.EvacuationNodeName != ""
	if marked {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			// The resourceVersion makes the patch conditional (409 on a change in between).
			patch, _ := json.Marshal(map[string]any{
				"metadata": map[string]any{"resourceVersion": vmi.ResourceVersion},
				"status":   map[string]any{"evacuationNodeName": nil},
			})
			_, err := cl.vmis.Namespace(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			if apierrors.IsConflict(err) {
				u, gerr := cl.vmis.Namespace(vmi.Namespace).Get(ctx, vmi.Name, metav1.GetOptions{})
				if gerr != nil {
					return gerr
				}
				fresh, cerr := fromUnstructured(u)
				if cerr != nil {
					return cerr
				}
				*vmi = *fresh
				if vmi.Status.EvacuationNodeName == "" {
					return nil
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("vmi/%s: clear status.evacuationNodeName: %w", key, err)
		}
	}
	ml, err := cl.migrations.Namespace(vmi.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{evacuationLabelVMI: vmi.Name}.String()})
	if err != nil {
		return fmt.Errorf("vmi/%s: list its migrations: %w", key, err)
	}
	aborted := 0
	for i := range ml.Items {
		m, err := toMigration(&ml.Items[i])
		if err != nil {
			return err
		}
		if _, ok := m.Annotations[evacuationAnnotation]; !ok || m.Spec.VMIName != vmi.Name || ended(m) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		err = cl.migrations.Namespace(vmi.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("vmi/%s: delete migration %s: %w", key, m.Name, err)
		}
		fmt.Fprintf(c.stdout, "virtualmachineinstancemigration/%s deleted (phase %s: aborted, the guest stays on its node)\n", m.Name, phaseOr(m.Status.Phase))
		aborted++
	}
	switch {
	case marked || aborted > 0:
		fmt.Fprintf(c.stdout, "vmi/%s: evacuation cancelled\n", key)
	default:
		fmt.Fprintf(c.stdout, "vmi/%s: not being evacuated\n", key)
	}
	return nil
}

func phaseOr(p vmletv1.VirtualMachineInstanceMigrationPhase) string {
	if p == "" {
		return "Pending"
	}
	return string(p)
}

func fromUnstructured(u *unstructured.Unstructured) (*vmletv1.VirtualMachineInstance, error) {
	var v vmletv1.VirtualMachineInstance
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, fmt.Errorf("vmi %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &v, nil
}
