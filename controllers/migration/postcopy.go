package migration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// LabelPostcopy is the Node label a node agent sets to "true" when its launchers' QEMU may use
// userfaultfd, which a post-copy migration target needs: an unprivileged QEMU may only with
// vm.unprivileged_userfaultfd=1 (QEMU 7.2 does not use /dev/userfaultfd).
const LabelPostcopy = "vmlet.dev/postcopy"

// ReasonPostCopyUnavailable is the Event reason of a migration whose configuration allows
// post-copy towards a node that cannot receive one: it runs pre-copy only.
const ReasonPostCopyUnavailable = "PostCopyUnavailable"

// PostcopyTarget says whether node can be a post-copy target, and why not.
func PostcopyTarget(node *corev1.Node) (bool, string) {
	if node.Labels[LabelPostcopy] == "true" {
		return true, ""
	}
	return false, fmt.Sprintf("node %s cannot receive a post-copy migration (label %s is not true: its QEMU may not use userfaultfd; set vm.unprivileged_userfaultfd=1 there)", node.Name, LabelPostcopy)
}

// effectivePostCopy turns allowPostCopy off when the target node cannot receive a post-copy;
// it returns why it did ("" when it did not).
func (c *Controller) effectivePostCopy(ctx context.Context, cfg *vmletv1.MigrationConfiguration, target string) (string, error) {
	if cfg.AllowPostCopy == nil || !*cfg.AllowPostCopy {
		return "", nil
	}
	node := &corev1.Node{}
	err := c.reader().Get(ctx, types.NamespacedName{Name: target}, node)
	if apierrors.IsNotFound(err) {
		node.Name = target
	} else if err != nil {
		return "", fmt.Errorf("read target node %s: %w", target, err)
	}
	if ok, why := PostcopyTarget(node); !ok {
		off := false
		cfg.AllowPostCopy = &off
		return why, nil
	}
	return "", nil
}
