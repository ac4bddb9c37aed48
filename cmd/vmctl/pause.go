package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// vmiClient is the dynamic client of the VMIs in t's namespace.
func (t *vmTarget) vmis() (dynamic.ResourceInterface, error) {
	dyn, err := dynamic.NewForConfig(t.cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return dyn.Resource(vmiResource).Namespace(t.vmi.Namespace), nil
}

// setPaused sets spec.paused with a merge patch (needs "patch virtualmachineinstances"): the
// node agent pauses or resumes the guest and keeps it so; the Paused condition says when it
// did. Equivalent to:
// kubectl patch vmi NAME --type merge -p '{"spec":{"paused":true}}'.
func (c *cli) setPaused(ctx context.Context, t *vmTarget, paused bool) error {
	vmis, err := t.vmis()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cur, err := vmis.Get(ctx, t.vmi.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("vmi %s: %w", t.vmi, err)
	}
	verb := map[bool]string{true: "paused", false: "unpaused"}[paused]
	was, _, _ := unstructured.NestedBool(cur.Object, "spec", "paused")
	if was == paused {
		fmt.Fprintf(c.stdout, "vmi/%s already %s (spec.paused=%v)\n", t.vmi.Name, verb, paused)
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"paused":%v}}`, paused)
	if _, err := vmis.Patch(ctx, t.vmi.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("vmi %s: %w", t.vmi, err)
	}
	fmt.Fprintf(c.stdout, "vmi/%s %s (spec.paused=%v)\n", t.vmi.Name, verb, paused)
	return nil
}
