package realclustere2e_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/realcluster"
)

// The node folders config/realcluster gives vmlet (the manifests' defaults).
const (
	launcherRoot = "/var/run/vmlet/launchers"
	nodeState    = "/var/lib/vmlet"
	volumeRoot   = nodeState + "/volumes"
)

// Images (hack/images.sh) and the test guest's (config/realcluster's --image flags).
const (
	vmletImage    = "vmlet.dev/vmlet:dev"
	launcherImage = "vmlet.dev/vmlet-launcher:dev"
	diskImage     = "vmlet.dev/testguest-disk:latest"
	kernelImage   = "vmlet.dev/testguest:latest" // kernelBoot: /vmlinuz, /initramfs.gz
)

// One cluster per package, with vmlet deployed; setupErr says why there is none; failed says
// whether a test failed (teardown keeps vmlet's logs then).
var (
	failed   atomic.Bool
	cl       *realcluster.Cluster
	kc       client.Client
	setupErr error
	repo     = realcluster.RepoRoot()
)

func TestMain(m *testing.M) { os.Exit(runPackage(m)) }

func runPackage(m *testing.M) int {
	if flag.Parse(); os.Geteuid() != 0 || testing.Short() {
		return m.Run() // the tests' prereq guards say why they cannot run (and fail under CI)
	}
	ctrllog.SetLogger(logr.Discard()) // the tests' clients log nothing worth reading
	t0 := time.Now()
	_, stateExisted := os.Stat(nodeState)
	_, runExisted := os.Stat(filepath.Dir(launcherRoot))
	code, err := func() (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		images, err := imagesDir()
		if err != nil {
			return 0, err
		}
		tImages := time.Since(t0)
		// Two nodes: the second is tainted, so only VMIs that tolerate it (the migration tests')
		// land there; the agent DaemonSet tolerates it (config/realcluster).
		cl, err = realcluster.Start(ctx, realcluster.Options{Nodes: 2, PauseTar: filepath.Join(images, "pause.tar"), Log: os.Stderr})
		if err != nil {
			return 0, fmt.Errorf("start the cluster: %w", err)
		}
		tCluster := time.Since(t0) - tImages
		for _, f := range []string{"vmlet.tar", "vmlet-launcher.tar"} {
			if err := cl.ImportImage(ctx, filepath.Join(images, f)); err != nil {
				return 0, err
			}
		}
		if err := deploy(ctx); err != nil {
			return 0, err
		}
		if kc, err = newClient(); err != nil {
			return 0, err
		}
		fmt.Fprintf(os.Stderr, "realclustere2e: setup %s (images %s, cluster %s, import+deploy %s)\n",
			time.Since(t0).Round(time.Second), tImages.Round(time.Second), tCluster.Round(time.Second),
			(time.Since(t0) - tImages - tCluster).Round(time.Second))
		code := m.Run()
		failed.Store(code != 0)
		return code, nil
	}()
	if err != nil {
		setupErr = err
		fmt.Fprintln(os.Stderr, "realclustere2e: setup failed:", err)
		code = m.Run() // every test fails with setupErr
	}
	if cl != nil {
		if err := teardown(errors.Is(stateExisted, os.ErrNotExist), errors.Is(runExisted, os.ErrNotExist)); err != nil {
			fmt.Fprintln(os.Stderr, "realclustere2e: teardown:", err)
			code = 1
		}
	}
	fmt.Fprintf(os.Stderr, "realclustere2e: package %s\n", time.Since(t0).Round(time.Second))
	return code
}

// imagesDir builds (or finds cached) vmlet's images and returns their folder; VMLET_IMAGES
// names another folder of the same three tarballs instead.
func imagesDir() (string, error) {
	if d := os.Getenv("VMLET_IMAGES"); d != "" {
		return d, nil
	}
	cmd := exec.Command("bash", filepath.Join(repo, "hack", "images.sh"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/images.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// deploy runs hack/cluster-deploy.sh (kubectl apply -k config/realcluster, both rollouts
// Ready) without its sample VMI: the tests make their own.
func deploy(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "hack", "cluster-deploy.sh"))
	var states []string
	for _, n := range cl.Nodes {
		states = append(states, n.HostPath(nodeState))
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cl.Kubeconfig, "KUBECTL="+cl.KubectlPath, "SAMPLE=none",
		"VMLET_NODE_STATE="+strings.Join(states, " "))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/cluster-deploy.sh: %w", err)
	}
	return nil
}

func newClient() (client.Client, error) {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, vmletv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return client.New(cl.Config, client.Options{Scheme: scheme})
}

// teardown deletes what the tests left (VMIs) and the deployment, stops the cluster and checks
// that nothing of it, and nothing in vmlet's node folders but the image cache, is left; those
// folders go too when they did not exist before (the launchers' root's parent, /var/run/vmlet,
// must then be empty: a node agent later run on the machine makes it its own).
func teardown(removeState, removeRun bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var errs []error
	if setupErr == nil {
		if out, err := cl.Kubectl(ctx, "delete", "vmi", "--all", "-A", "--wait", "--timeout=3m"); err != nil {
			errs = append(errs, fmt.Errorf("delete VMIs: %w: %s", err, out))
		}
		// Run and volume folders are the agent's to remove with each VMI, on every node.
		for _, n := range cl.Nodes {
			for _, d := range []string{n.HostPath(launcherRoot), n.HostPath(volumeRoot)} {
				if ents, err := os.ReadDir(d); err == nil && len(ents) > 0 {
					errs = append(errs, fmt.Errorf("%s holds %d entries after every VMI was deleted: %s", d, len(ents), describeLeft(ctx, d, ents)))
				}
			}
		}
		if len(errs) > 0 || failed.Load() {
			// The agents' and the controller's whole logs outlive the cluster, for the failure.
			p := fmt.Sprintf("/var/tmp/realclustere2e-vmlet-%d.log", time.Now().Unix())
			logs, _ := cl.Kubectl(ctx, "logs", "-n", "vmlet-system", "-l", "app.kubernetes.io/part-of=vmlet", "--prefix", "--tail=-1", "--max-log-requests=10")
			if err := os.WriteFile(p, logs, 0o600); err == nil {
				fmt.Fprintf(os.Stderr, "realclustere2e: vmlet's logs kept in %s\n", p)
			}
		}
		if out, err := cl.Kubectl(ctx, "delete", "-k", filepath.Join(repo, "config", "realcluster"), "--wait", "--timeout=3m"); err != nil {
			errs = append(errs, fmt.Errorf("kubectl delete -k config/realcluster: %w: %s", err, out))
		}
	}
	// Checked under the cluster's lock: the next cluster (another package's) is not ours.
	r, err := cl.StopAndResidue()
	if err != nil {
		errs = append(errs, fmt.Errorf("stop the cluster: %w", err))
	}
	if len(r) > 0 {
		errs = append(errs, fmt.Errorf("the cluster left %d things: %s", len(r), strings.Join(r, "; ")))
	}
	if mounts := mountsBelow(launcherRoot, nodeState); len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("mounts left below vmlet's folders: %s", strings.Join(mounts, ", ")))
	}
	_ = os.RemoveAll(filepath.Join(nodeState, "sources"))
	_ = os.RemoveAll(launcherRoot)
	if removeRun {
		if err := os.Remove(filepath.Dir(launcherRoot)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s, made by the test run, is left: %w", filepath.Dir(launcherRoot), err))
		}
	}
	if removeState {
		_ = os.RemoveAll(nodeState)
	}
	return errors.Join(errs...)
}

// node is the cluster's node of that name (the test fails when there is none).
func node(t testing.TB, name string) realcluster.Node {
	t.Helper()
	for _, n := range cl.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %q in the cluster", name)
	return realcluster.Node{}
}

// need fails the test when the package has no cluster (prereq: root; not -short).
func need(t testing.TB) {
	t.Helper()
	prereq.Root(t)
	if setupErr != nil {
		t.Fatalf("no cluster: %v", setupErr)
	}
	if cl == nil {
		t.Fatal("no cluster (TestMain did not start one)")
	}
}

// describeLeft names what was left in folder d (entries are VMI UIDs), with each entry's age and
// contents and the agent's log lines about it, so that a leak seen once can be explained.
func describeLeft(ctx context.Context, d string, ents []os.DirEntry) string {
	logs, _ := cl.Kubectl(ctx, "logs", "-n", "vmlet-system", "-l", "app.kubernetes.io/name=vmlet-agent", "--prefix", "--tail=-1")
	var b strings.Builder
	for _, e := range ents {
		p := filepath.Join(d, e.Name())
		fmt.Fprintf(&b, "\n  %s", e.Name())
		keys := []string{e.Name()}
		if n, ok := vmiNames.Load(e.Name()); ok {
			fmt.Fprintf(&b, " (VMI %s)", n)
			keys = append(keys, n.(string))
		}
		if fi, err := os.Lstat(p); err == nil {
			fmt.Fprintf(&b, " (%s, modified %s ago)", fi.Mode(), time.Since(fi.ModTime()).Round(time.Millisecond))
		}
		if sub, err := os.ReadDir(p); err == nil {
			names := make([]string, 0, len(sub))
			for _, s := range sub {
				names = append(names, s.Name())
			}
			fmt.Fprintf(&b, " holds [%s]", strings.Join(names, " "))
		}
		for _, l := range strings.Split(string(logs), "\n") {
			if slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(l, k) }) {
				fmt.Fprintf(&b, "\n    agent: %s", l)
			}
		}
	}
	return b.String()
}
