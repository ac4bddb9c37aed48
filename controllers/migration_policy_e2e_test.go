package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// createPolicy creates a MigrationPolicy, deleted after the test.
func createPolicy(t *testing.T, name string, vmiSel, nsSel map[string]string, set func(*migrationsv1.MigrationPolicySpec)) {
	t.Helper()
	p := &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Selectors = &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel, NamespaceSelector: nsSel}
	set(&p.Spec)
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePolicy(t, name) })
}

func deletePolicy(t *testing.T, name string) {
	t.Helper()
	p := &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Delete(context.Background(), p); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

// labelNamespace sets a label on namespace ns, removed after the test.
func labelNamespace(t *testing.T, ns, key, value string) {
	t.Helper()
	ctx := context.Background()
	set := func(v *string) error {
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			return err
		}
		patch := client.MergeFrom(n.DeepCopy())
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if v == nil {
			delete(n.Labels, key)
		} else {
			n.Labels[key] = *v
		}
		return env.Client.Patch(ctx, n, patch)
	}
	if err := set(&value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(nil); err != nil {
			t.Error(err)
		}
	})
}

// policyName is the migration policy a migration recorded, "" for none.
func policyName(m *vmletv1.VirtualMachineInstanceMigration) string {
	if ms := m.Status.MigrationState; ms != nil && ms.MigrationPolicyName != nil {
		return *ms.MigrationPolicyName
	}
	return ""
}

// timedOut waits until the migration failed and its reason says the source aborted it at its
// completion timeout, and returns the migration.
func timedOut(t *testing.T, key client.ObjectKey) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	failureOf(t, key)
	return failureReason(t, key, "(completionTimeoutPerGiB)")
}

// TestMigrationPolicy: MigrationPolicies change real migrations between two nodes. A policy
// the vmi does not match changes nothing (the migration succeeds with the cluster's defaults,
// no policy recorded); a policy matching the vmi's label with a low bandwidth and a tiny
// completionTimeoutPerGiB makes the same migration fail at its completion timeout, its name
// and values recorded. With that slow configuration as the cluster's, a guest dirtying its
// memory hits the completion timeout; a policy adding allowPostCopy, and matching more labels
// (the vmi's and its namespace's) than a policy that forbids post-copy and wins on the name,
// makes the same migration complete in post-copy. The KubeVirt fields vmlet cannot honour are
// refused by the API server, by name.
func TestMigrationPolicy(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	allowUserfaultfd(t)
	ctx := context.Background()

	t.Run("unsupported fields are refused by name", func(t *testing.T) {
		for field, value := range map[string]any{"maxDowntimeMs": int64(100), "experimental": map[string]any{"compression": "zstd"}} {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": migrationsv1.GroupVersion.String(), "kind": "MigrationPolicy",
				"metadata": map[string]any{"name": "unsupported"},
				"spec":     map[string]any{"selectors": map[string]any{}, field: value},
			}}
			err := env.Client.Create(ctx, u)
			if err == nil {
				deletePolicy(t, "unsupported")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec."+field) || !strings.Contains(err.Error(), "not supported by vmlet") {
				t.Errorf("create a policy with spec.%s: %v, want 422 naming the field", field, err)
			}
		}
		p := &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "negative"}}
		p.Spec.Selectors = &migrationsv1.Selectors{}
		p.Spec.BandwidthPerMigration = ptr.To(resource.MustParse("-1Mi"))
		if err := env.Client.Create(ctx, p); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("create a policy with a negative bandwidth: %v, want 422", err)
			_ = env.Client.Delete(ctx, p)
		}
	})

	n := startTwoNodes(t)
	defer n.stop(t)
	setMigrationConfig(t, "")
	defer setMigrationConfig(t, "")
	setPostcopyLabel(t, testNode, true)
	setPostcopyLabel(t, secondNode, true)

	const vmiLabel, nsLabel = "vmlet.dev/policy-e2e", "vmlet.dev/policy-e2e-ns"
	vmi := masqueradeVMI("policy")
	vmi.Labels = map[string]string{vmiLabel: "yes"}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = mustGetVMI(t, vmi)
	uid := string(vmi.UID)
	guestCounter(t, n.a, vmi, "policy")

	// 128 MiB at 8 MiB/s take ≈16 s of pre-copy; the completion timeout is 2 s (for at least
	// 1 GiB).
	slow := func(s *migrationsv1.MigrationPolicySpec) {
		s.BandwidthPerMigration = ptr.To(resource.MustParse("8Mi"))
		s.CompletionTimeoutPerGiB = ptr.To[int64](2)
	}

	t.Run("a policy the vmi does not match has no effect", func(t *testing.T) {
		createPolicy(t, "other", map[string]string{vmiLabel: "no"}, nil, slow)
		m := migrate(t, vmi, "policy-nomatch")
		ms := m.Status.MigrationState
		if m.Status.Phase != vmletv1.MigrationSucceeded || policyName(m) != "" {
			t.Fatalf("phase %s, policy %q: want Succeeded without a policy: %+v", m.Status.Phase, policyName(m), ms)
		}
		if c := ms.MigrationConfiguration; !c.BandwidthPerMigration.IsZero() || *c.CompletionTimeoutPerGiB != 150 {
			t.Errorf("recorded bandwidth %s, completionTimeoutPerGiB %d: want the defaults (0, 150)", c.BandwidthPerMigration, *c.CompletionTimeoutPerGiB)
		}
		assertStaysOn(t, n, vmi, secondNode)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	t.Run("a matching policy's bandwidth and completion timeout apply", func(t *testing.T) {
		createPolicy(t, "slow", map[string]string{vmiLabel: "yes"}, nil, slow)
		m := timedOut(t, startMigration(t, vmi, "policy-slow"))
		ms := m.Status.MigrationState
		if policyName(m) != "slow" {
			t.Errorf("policy %q: want slow", policyName(m))
		}
		if c := ms.MigrationConfiguration; c.BandwidthPerMigration.Cmp(resource.MustParse("8Mi")) != 0 || *c.CompletionTimeoutPerGiB != 2 {
			t.Errorf("recorded bandwidth %s, completionTimeoutPerGiB %d: want the policy's (8Mi, 2)", c.BandwidthPerMigration, *c.CompletionTimeoutPerGiB)
		}
		v := mustGetVMI(t, vmi)
		if v.Status.MigrationState == nil || ptr.Deref(v.Status.MigrationState.MigrationPolicyName, "") != "slow" {
			t.Errorf("vmi migrationState %+v: want migrationPolicyName slow", v.Status.MigrationState)
		}
		assertStaysOn(t, n, vmi, secondNode)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	// The guest rewrites 16 MiB of random data in a loop from here on.
	guestShell(t, n.b, vmi, "dd if=/dev/urandom of=/tmp/dirty.src bs=1M count=16 2>/dev/null; (while true; do cp /tmp/dirty.src /tmp/dirty; rm /tmp/dirty; done) </dev/null >/dev/null 2>&1 & echo started")
	setMigrationConfig(t, "bandwidthPerMigration: 8Mi\ncompletionTimeoutPerGiB: 2\n")

	t.Run("the cluster's configuration hits the completion timeout", func(t *testing.T) {
		m := timedOut(t, startMigration(t, vmi, "policy-default"))
		ms := m.Status.MigrationState
		if policyName(m) != "" || ms.Mode != vmletv1.MigrationPreCopy {
			t.Errorf("policy %q, mode %s: want no policy, pre-copy", policyName(m), ms.Mode)
		}
		assertStaysOn(t, n, vmi, secondNode)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	t.Run("a policy with post-copy completes; more matching labels win", func(t *testing.T) {
		labelNamespace(t, vmi.Namespace, nsLabel, "yes")
		// "a-precopy" would win on the name; "z-postcopy" matches two labels.
		createPolicy(t, "a-precopy", map[string]string{vmiLabel: "yes"}, nil, func(s *migrationsv1.MigrationPolicySpec) {
			s.AllowPostCopy = ptr.To(false)
		})
		createPolicy(t, "z-postcopy", map[string]string{vmiLabel: "yes"}, map[string]string{nsLabel: "yes"}, func(s *migrationsv1.MigrationPolicySpec) {
			s.AllowPostCopy = ptr.To(true)
		})
		m := migrate(t, vmi, "policy-postcopy")
		ms := m.Status.MigrationState
		if m.Status.Phase != vmletv1.MigrationSucceeded || ms.Mode != vmletv1.MigrationPostCopy || policyName(m) != "z-postcopy" {
			t.Fatalf("phase %s, mode %s, policy %q: want Succeeded in post-copy by z-postcopy: %+v", m.Status.Phase, ms.Mode, policyName(m), ms)
		}
		if c := ms.MigrationConfiguration; !*c.AllowPostCopy || c.BandwidthPerMigration.Cmp(resource.MustParse("8Mi")) != 0 || *c.CompletionTimeoutPerGiB != 2 {
			t.Errorf("recorded %+v: want allowPostCopy from the policy over the cluster's 8Mi and 2", c)
		}
		waitEventAbout(t, vmi, "Normal", "MigrationPostCopy")
		assertStaysOn(t, n, vmi, testNode)
		waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
	})
}
