package realclustere2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/poll"
)

// kubevirtExamples are KubeVirt's own example VMIs (shared/kubevirt-examples, beside the repo)
// with only their apiVersion changed, as a user applies them. Their images are served by the
// agent from the test guest's stand-ins (config/realcluster).
func kubevirtExamples(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(apienv.RepoRoot(), "..", "shared", "kubevirt-examples", "*.yaml"))
	if err != nil || len(files) < 9 {
		t.Fatalf("KubeVirt examples: %d files, %v (want at least 9)", len(files), err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = strings.Replace(string(b), "apiVersion: kubevirt.io/v1", "apiVersion: vmlet.dev/v1alpha1", 1)
	}
	return out
}

// TestKubeVirtExamples applies every KubeVirt example on the real cluster: each boots in its
// launcher pod (guest agent connected), except the two that name what this node does not have,
// which wait with KubeVirt's reason (a claim that does not exist) or fail to start with vmlet's
// (a hostDisk outside the allowed root) — never stuck without one. Deleting them leaves the node
// clean.
func TestKubeVirtExamples(t *testing.T) {
	need(t)
	t.Parallel()
	waiting := map[string]string{
		"vmi-pvc.yaml":       "FailedPvcNotFound",
		"vmi-host-disk.yaml": "HostPathNotAllowed",
	}
	for file, manifest := range kubevirtExamples(t) {
		t.Run(strings.TrimSuffix(file, ".yaml"), func(t *testing.T) {
			t.Parallel()
			var meta struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(manifest), &meta); err != nil || meta.Metadata.Name == "" {
				t.Fatalf("%s: no metadata.name (%v)", file, err)
			}
			name := meta.Metadata.Name
			t0 := time.Now()
			kubectl(t, manifest, "apply", "-n", "default", "-f", "-")
			t.Cleanup(func() {
				// Whatever the test did, no VMI is left for the next ones (teardown checks the node).
				_ = kc.Delete(context.Background(), &vmletv1.VirtualMachineInstance{ObjectMeta: objMeta(name)})
			})
			if reason, ok := waiting[file]; ok {
				vmi := waitVMI(t, name, runningTimeout, "Synchronized=False "+reason, func(v *vmletv1.VirtualMachineInstance) bool {
					for _, c := range v.Status.Conditions {
						if c.Type == "Synchronized" && c.Status == "False" && c.Reason == reason {
							return true
						}
					}
					return false
				})
				if vmi.Status.Phase == vmletv1.Running {
					t.Errorf("%s runs although %s", name, reason)
				}
				deleteVMI(t, name)
				return
			}
			vmi := waitBooted(t, name)
			pod := scheduled(t, vmi)
			fp := nodeFootprint(t, vmi, pod)
			t.Logf("%s: applied → guest booted in %s", name, time.Since(t0).Round(time.Millisecond))
			deleteVMI(t, name)
			poll.Until(t, goneTimeout, "launcher pod gone", func() (bool, string) {
				p := launcherPod(t, vmi)
				if p == nil {
					return true, ""
				}
				return false, p.Name + " " + string(p.Status.Phase)
			})
			assertGone(t, fp)
		})
	}
}
