package subresources

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/vmistream"
)

// Where QMP allow-lists come from (for callers without Unrestricted):
//   - the VMI's Namespace annotation AnnotQMPAllowList, if present (only who may update
//     Namespaces — a cluster admin — can set it, so a namespace's own admins cannot widen it);
//   - else the cluster's, ConfigMap vmlet-system/vmlet-config key ConfigKeyQMPAllowList;
//   - else DefaultQMPAllowList.
//
// Each is a comma- or space-separated list of QMP command globs ("query-*,human-monitor-command");
// an empty value allows nothing. A caller allowed to update virtualmachineinstances/
// qmp-unrestricted in the VMI's namespace (vmlet.dev:admin) runs any command.
const (
	AnnotQMPAllowList     = "vmlet.dev/qmp-allow-list"
	ConfigKeyQMPAllowList = "qmpAllowList"
	DefaultQMPAllowList   = "query-*"
)

// AllowListFor is the QMP commands u may run on VMIs in namespace ns.
func AllowListFor(ctx context.Context, c client.Reader, authz authorizer.Authorizer, u user.Info, ns, name string) (vmistream.AllowList, error) {
	d, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: "update", Namespace: ns, APIGroup: Group, APIVersion: Version,
		Resource: Resource, Subresource: Unrestricted, Name: name, ResourceRequest: true,
	})
	if err != nil && d != authorizer.DecisionAllow {
		return nil, fmt.Errorf("authorize %s: %w", Unrestricted, err)
	}
	if d == authorizer.DecisionAllow {
		return vmistream.AllowList{"*"}, nil
	}
	spec, err := allowListSpec(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	return vmistream.ParseAllowList(spec)
}

// allowListSpec is the allow-list text that applies in ns (see AnnotQMPAllowList).
func allowListSpec(ctx context.Context, c client.Reader, ns string) (string, error) {
	n := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
		return "", fmt.Errorf("read namespace %s: %w", ns, err)
	}
	if v, ok := n.Annotations[AnnotQMPAllowList]; ok {
		return v, nil
	}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: migration.ConfigNamespace, Name: migration.ConfigName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return DefaultQMPAllowList, nil
	case err != nil:
		return "", fmt.Errorf("read %s/%s: %w", migration.ConfigNamespace, migration.ConfigName, err)
	}
	if v, ok := cm.Data[ConfigKeyQMPAllowList]; ok {
		return v, nil
	}
	return DefaultQMPAllowList, nil
}
