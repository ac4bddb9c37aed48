package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/poll"
)

// TestVMIThroughAPI runs pause, unpause, migrate and migrate-cancel against a real
// kube-apiserver (they need no aggregated API), the test playing the migration controller by
// writing statuses, and the binary as a kubectl plugin under the real kubectl.
func TestVMIThroughAPI(t *testing.T) {
	env := startAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vm1", "vm2"} {
		v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, Labels: map[string]string{"app": "db"}}}
		q := resource.MustParse("128Mi")
		v.Spec.Domain.Memory = &vmletv1.Memory{Guest: &q}
		if err := c.Create(ctx, v); err != nil {
			t.Fatalf("create vmi %s: %v", name, err)
		}
	}
	// A kubeconfig whose context's namespace is prod: no -n needed.
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = "prod"
	prodKC := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, prodKC); err != nil {
		t.Fatal(err)
	}
	kc := env.Kubeconfig
	getVMI := func(name string) *vmletv1.VirtualMachineInstance {
		t.Helper()
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "prod", Name: name}, v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	t.Run("pause and unpause", func(t *testing.T) {
		before := getVMI("vm1")
		r := vmctlIn(t, nil, "pause", "vm1", "--kubeconfig", prodKC)
		if r.code != exitOK || r.stdout != "vmi/vm1 paused (spec.paused=true)\n" {
			t.Fatalf("pause: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		after := getVMI("vm1")
		if !after.Spec.Paused {
			t.Fatal("spec.paused not set")
		}
		// The merge patch changed spec.paused and nothing else.
		after.Spec.Paused = false
		if d := cmp.Diff(before.Spec, after.Spec); d != "" || !cmp.Equal(before.Labels, after.Labels) {
			t.Errorf("pause changed more than spec.paused (-before +after):\n%s", d)
		}
		if r := vmctlIn(t, nil, "pause", "vm1", "-n", "prod", "--kubeconfig", kc); r.code != exitOK || r.stdout != "vmi/vm1 already paused (spec.paused=true)\n" {
			t.Errorf("second pause: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		if r := vmctlIn(t, nil, "unpause", "vm1", "-n", "prod", "--kubeconfig", kc); r.code != exitOK || r.stdout != "vmi/vm1 unpaused (spec.paused=false)\n" {
			t.Errorf("unpause: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		if getVMI("vm1").Spec.Paused {
			t.Error("spec.paused still true after unpause")
		}
		// Without -n the namespace is "default" (env.Kubeconfig's context has none).
		if r := vmctlIn(t, nil, "pause", "vm1", "--kubeconfig", kc); r.code != exitNotFound || !strings.Contains(r.stderr, `vmi default/vm1: virtualmachineinstances.vmlet.dev "vm1" not found`) {
			t.Errorf("pause in default: exit %d %q", r.code, r.stderr)
		}
	})

	migrations := func() []vmletv1.VirtualMachineInstanceMigration {
		t.Helper()
		var l vmletv1.VirtualMachineInstanceMigrationList
		if err := c.List(ctx, &l, client.InNamespace("prod")); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(l.Items, func(a, b vmletv1.VirtualMachineInstanceMigration) int {
			return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
		})
		return l.Items
	}
	created := regexp.MustCompile(`^virtualmachineinstancemigration/(vm1-migration-[a-z0-9]{5}) created: migrating vmi vm1\n`)
	setStatus := func(name string, st vmletv1.VirtualMachineInstanceMigrationStatus) {
		t.Helper()
		m := &vmletv1.VirtualMachineInstanceMigration{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "prod", Name: name}, m); err != nil {
			t.Fatal(err)
		}
		m.Status = st
		if err := c.Status().Update(ctx, m); err != nil {
			t.Fatalf("migration %s status: %v", name, err)
		}
	}
	// startWait runs migrate --wait in the background and returns it with its migration.
	startWait := func(deadline string) (*bg, string) {
		t.Helper()
		b := vmctlBG(t, newCLI(nil, nil, nil), "migrate", "vm1", "--wait", "--deadline", deadline, "--kubeconfig", prodKC)
		name := b.stdout.wait(t, regexp.MustCompile(`virtualmachineinstancemigration/(vm1-migration-[a-z0-9]{5}) created`))
		return b, name
	}

	var first string
	t.Run("migrate", func(t *testing.T) {
		r := vmctlIn(t, nil, "migrate", "vm1", "--kubeconfig", prodKC)
		m := created.FindStringSubmatch(r.stdout)
		if r.code != exitOK || m == nil {
			t.Fatalf("migrate: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		first = m[1]
		l := migrations()
		if len(l) != 1 || l[0].Name != first || l[0].GenerateName != "vm1-migration-" || l[0].Spec.VMIName != "vm1" {
			t.Errorf("migrations: %+v", l)
		}
		if r := vmctlIn(t, nil, "migrate", "nope", "--kubeconfig", prodKC); r.code != exitNotFound || len(migrations()) != 1 {
			t.Errorf("migrate nope: exit %d %q, %d migrations", r.code, r.stderr, len(migrations()))
		}
	})

	t.Run("migrate --wait succeeded", func(t *testing.T) {
		b, name := startWait("1m")
		setStatus(name, vmletv1.VirtualMachineInstanceMigrationStatus{Phase: vmletv1.MigrationScheduling})
		b.stdout.wait(t, regexp.MustCompile(`(`+name+`: Scheduling\n)`))
		setStatus(name, vmletv1.VirtualMachineInstanceMigrationStatus{Phase: vmletv1.MigrationRunning,
			MigrationState: &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "n1", TargetNode: "n2"}})
		b.stdout.wait(t, regexp.MustCompile(`(`+name+`: Running\n)`))
		setStatus(name, vmletv1.VirtualMachineInstanceMigrationStatus{Phase: vmletv1.MigrationSucceeded,
			MigrationState: &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "n1", TargetNode: "n2", Completed: true}})
		if code := b.exited(t); code != exitOK {
			t.Fatalf("exit %d stderr %s", code, b.stderr)
		}
		want := "virtualmachineinstancemigration/" + name + " created: migrating vmi vm1\n" +
			"virtualmachineinstancemigration/" + name + ": Scheduling\n" +
			"virtualmachineinstancemigration/" + name + ": Running\n" +
			"virtualmachineinstancemigration/" + name + ": Succeeded\n" +
			"vmi/vm1 migrated from node n1 to node n2\n"
		if b.stdout.String() != want {
			t.Errorf("stdout:\n%s\nwant:\n%s", b.stdout, want)
		}
	})

	t.Run("migrate --wait failed", func(t *testing.T) {
		b, name := startWait("1m")
		setStatus(name, vmletv1.VirtualMachineInstanceMigrationStatus{Phase: vmletv1.MigrationFailed,
			MigrationState: &vmletv1.VirtualMachineInstanceMigrationState{Failed: true, FailureReason: "target pod did not start"}})
		if code := b.exited(t); code != exitRefused || b.stderr.String() != "vmctl: migration failed: "+name+": target pod did not start\n" {
			t.Errorf("exit %d stderr %q", code, b.stderr)
		}
	})

	var slow string
	t.Run("migrate --wait deadline", func(t *testing.T) {
		var b *bg
		b, slow = startWait("2s")
		if code := b.exited(t); code != exitBlocked || !strings.Contains(b.stderr.String(), "migration "+slow+` not ended after 2s (phase ""); it goes on: vmctl migrate-cancel vm1 stops it`) {
			t.Errorf("exit %d stderr %q", code, b.stderr)
		}
	})

	t.Run("migrate-cancel", func(t *testing.T) {
		other := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "vm2-mig"},
			Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm2"}}
		if err := c.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		setStatus(first, vmletv1.VirtualMachineInstanceMigrationStatus{Phase: vmletv1.MigrationRunning})
		// slow is held by a finalizer, as the migration controller holds one while it aborts.
		m := &vmletv1.VirtualMachineInstanceMigration{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "prod", Name: slow}, m); err != nil {
			t.Fatal(err)
		}
		m.Finalizers = []string{"example.com/abort"}
		if err := c.Update(ctx, m); err != nil {
			t.Fatal(err)
		}
		r := vmctlIn(t, nil, "migrate-cancel", "vm1", "--wait", "--deadline", "2s", "--kubeconfig", prodKC)
		names := []string{first, slow}
		slices.Sort(names)
		lines := map[string]string{first: "virtualmachineinstancemigration/" + first + " deleted (was Running): migration of vmi vm1 cancelled\n",
			slow: "virtualmachineinstancemigration/" + slow + " deleted (was not started): migration of vmi vm1 cancelled\n"}
		want := lines[names[0]] + lines[names[1]]
		if names[0] == first {
			want += "virtualmachineinstancemigration/" + first + " gone\n"
		}
		if r.code != exitBlocked || r.stdout != want || !strings.Contains(r.stderr, "migration "+slow+" still there after 2s (its abort has not ended)") {
			t.Errorf("migrate-cancel --wait: exit %d stdout:\n%s\nwant:\n%s\nstderr %q", r.code, r.stdout, want, r.stderr)
		}
		// Nothing left to cancel: the held one is being deleted already.
		if r := vmctlIn(t, nil, "migrate-cancel", "vm1", "--kubeconfig", prodKC); r.code != exitNotFound || !strings.Contains(r.stderr, "no migration of vmi prod/vm1 to cancel") {
			t.Errorf("second migrate-cancel: exit %d %q", r.code, r.stderr)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "prod", Name: slow}, m); err != nil {
			t.Fatal(err)
		}
		m.Finalizers = nil
		if err := c.Update(ctx, m); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 30*time.Second, "the held migration gone", func() (bool, string) {
			l := migrations()
			var left []string
			for _, m := range l {
				left = append(left, m.Name+"/"+string(m.Status.Phase))
			}
			return len(l) == 3, strings.Join(left, " ")
		})
		// What is left: the Succeeded and Failed ones of vm1, and vm2's.
		for _, m := range migrations() {
			if m.Spec.VMIName == "vm1" && m.Status.Phase != vmletv1.MigrationSucceeded && m.Status.Phase != vmletv1.MigrationFailed {
				t.Errorf("migration %s (%s) not cancelled", m.Name, m.Status.Phase)
			}
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "prod", Name: "vm2-mig"}, m); err != nil {
			t.Errorf("vm2's migration: %v", err)
		}
		// --wait when the deletion is immediate.
		b, name := startWait("1m")
		b.stop(t)
		r = vmctlIn(t, nil, "migrate-cancel", "vm1", "--wait", "--kubeconfig", prodKC)
		want = "virtualmachineinstancemigration/" + name + " deleted (was not started): migration of vmi vm1 cancelled\n" +
			"virtualmachineinstancemigration/" + name + " gone\n"
		if r.code != exitOK || r.stdout != want {
			t.Errorf("migrate-cancel --wait: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("kubectl plugin", func(t *testing.T) {
		dir := t.TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, pluginName), ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		kubectl := func(args ...string) (string, error) {
			cmd := exec.CommandContext(ctx, env.KubectlPath, args...)
			cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+prodKC)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := kubectl("plugin", "list")
		if err != nil || !strings.Contains(out, filepath.Join(dir, pluginName)) {
			t.Errorf("kubectl plugin list: %v\n%s", err, out)
		}
		out, err = kubectl("vmctl", "--help")
		if err != nil || !strings.Contains(out, "Usage:\n  kubectl vmctl [flags]\n  kubectl vmctl [command]") || !strings.Contains(out, "  kubectl vmctl console my-vm -n prod") {
			t.Errorf("kubectl vmctl --help: %v\n%s", err, out)
		}
		// $KUBECONFIG (with the prod context) reaches the plugin, as kubectl's own commands.
		out, err = kubectl("vmctl", "pause", "vm2")
		if err != nil || out != "vmi/vm2 paused (spec.paused=true)\n" || !getVMI("vm2").Spec.Paused {
			t.Errorf("kubectl vmctl pause vm2: %v %q", err, out)
		}
		out, err = kubectl("vmctl", "console")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(out, "Run 'kubectl vmctl console --help' for usage.") {
			t.Errorf("kubectl vmctl console: %v %q", err, out)
		}
	})
}
