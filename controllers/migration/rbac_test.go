package migration_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestPolicyWithControllerRole: the migration controller, running with nothing but the
// generated ClusterRole (config/rbac/role.yaml, impersonated), reads the MigrationPolicies and
// the vmi's Namespace when it schedules a migration against a real API server, and hands the
// nodes the configuration of the policy that wins by KubeVirt's precedence, its name in
// migrationState.migrationPolicyName; it labels the vmi with the migration's nodes (patch).
func TestPolicyWithControllerRole(t *testing.T) {
	prereq.APIServer(t)
	env, err := apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme}})
	if err != nil {
		t.Fatalf("start api server: %v", err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	asController, err := client.New(controllerRole(ctx, t, env), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "policy-rbac", Labels: map[string]string{"team": "a"}}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "vm", Labels: map[string]string{"app": "db"}}}
	mem := resource.MustParse("128Mi")
	vmi.Spec.Domain.Memory = &vmletv1.Memory{Guest: &mem}
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	vmi.Status.Phase, vmi.Status.NodeName = vmletv1.Running, "node-a"
	if err := env.Client.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	for _, p := range []migrationsv1.MigrationPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "a-everything"}, Spec: migrationsv1.MigrationPolicySpec{
			Selectors: &migrationsv1.Selectors{}, CompletionTimeoutPerGiB: ptr.To[int64](10)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b-team-db"}, Spec: migrationsv1.MigrationPolicySpec{
			Selectors: &migrationsv1.Selectors{
				VirtualMachineInstanceSelector: migrationsv1.LabelSelector{"app": "db"},
				NamespaceSelector:              migrationsv1.LabelSelector{"team": "a"},
			},
			BandwidthPerMigration: ptr.To(resource.MustParse("1Mi"))}},
	} {
		if err := env.Client.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	m := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "m"}}
	m.Spec.VMIName = vmi.Name
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}

	c := &migration.Controller{
		Client: asController, Recorder: events.NewFakeRecorder(100),
		Pick: func(context.Context, migration.TargetRequest) (migration.Target, error) {
			return migration.Target{Node: "node-b"}, nil
		},
	}
	key := client.ObjectKeyFromObject(m)
	for i := 0; m.Status.Phase != vmletv1.MigrationScheduled; i++ {
		if m.Status.Phase == vmletv1.MigrationFailed || i == 10 {
			t.Fatalf("migration phase %s after %d passes: %+v", m.Status.Phase, i, m.Status.Conditions)
		}
		if _, err := c.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile as the controller's role: %v", err)
		}
		if err := env.Client.Get(ctx, key, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
		t.Fatal(err)
	}
	ms := vmi.Status.MigrationState
	if vmi.Labels[migration.LabelSourceNode] != "node-a" || vmi.Labels[migration.LabelTargetNode] != "node-b" || vmi.Labels["app"] != "db" {
		t.Errorf("vmi labels %v: want the migration's nodes next to its own", vmi.Labels)
	}
	if got := ptr.Deref(ms.MigrationPolicyName, ""); got != "b-team-db" {
		t.Errorf("migrationPolicyName %q, want b-team-db (two matching labels over a-everything's none)", got)
	}
	if cfg := ms.MigrationConfiguration; cfg.BandwidthPerMigration.Cmp(resource.MustParse("1Mi")) != 0 || *cfg.CompletionTimeoutPerGiB != migration.DefaultCompletionTimeoutPerGiB {
		t.Errorf("recorded bandwidth %s, completionTimeoutPerGiB %d: want b-team-db's 1Mi over the cluster's default %d", cfg.BandwidthPerMigration, *cfg.CompletionTimeoutPerGiB, migration.DefaultCompletionTimeoutPerGiB)
	}
}

// controllerRole binds the generated ClusterRole (config/rbac/role.yaml) to a user and returns
// a configuration that impersonates that user: the controller's permissions, no more.
func controllerRole(ctx context.Context, t *testing.T, env *apienv.Env) *rest.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(apienv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatalf("decode role.yaml: %v", err)
	}
	const user = "vmlet-controller-test"
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	imp := rest.CopyConfig(env.Config)
	imp.Impersonate = rest.ImpersonationConfig{UserName: user}
	return imp
}
