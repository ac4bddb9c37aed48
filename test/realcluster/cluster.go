package realcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options tune Start. Zero values take the defaults.
type Options struct {
	Root, RunDir string // default DefaultRoot, DefaultRunDir
	NodeName     string // default DefaultNodeName
	// Nodes is how many nodes (kubelet + containerd) the cluster has, 1 (default) or 2; every
	// node but the first is tainted (Node.Taint) and has PrivateHostPaths of its own.
	Nodes int
	// PauseTar is an OCI tarball of PauseImage (default: pause.tar in the folder
	// hack/images.sh prints).
	PauseTar string
	// Detach leaves the daemons running after this process exits (vmlet-cluster up); otherwise
	// they get SIGKILL when it dies and the next Start cleans up.
	Detach bool
	// Log receives progress lines (default io.Discard).
	Log io.Writer
}

// Cluster is a running single-node cluster.
type Cluster struct {
	// Kubeconfig is an admin (system:masters) kubeconfig file.
	Kubeconfig string
	// Config is the same admin identity for client-go and controller-runtime.
	Config *rest.Config
	// NodeName is the first node's name.
	NodeName string
	// Nodes are the cluster's nodes, the first first.
	Nodes []Node
	// KubectlPath is the kubectl built with the control plane.
	KubectlPath string
	// KubeletRootDir is the first node's kubelet --root-dir (device plugins register in
	// DevicePluginDir, which the kubelet does not move with it).
	KubeletRootDir string
	// Bin is the folder holding the control-plane binaries.
	Bin string
	// LockWait is how long Start waited for another cluster to go.
	LockWait time.Duration

	l    layout
	lock *os.File
	log  io.Writer
}

func (o *Options) defaults() {
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if o.RunDir == "" {
		o.RunDir = DefaultRunDir
	}
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Nodes <= 0 {
		o.Nodes = 1
	}
}

// RepoRoot is the folder holding the main go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binaries builds (or finds cached) the control-plane binaries and returns their folder.
func Binaries(log io.Writer) (string, error) {
	if d := os.Getenv("VMLET_CLUSTER_BIN"); d != "" {
		return d, nil
	}
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "test", "assets", "controlplane", "build.sh"))
	cmd.Env = append(os.Environ(), "BINARIES=kube-apiserver kubectl etcd kubelet kube-scheduler kube-controller-manager kube-proxy")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build control plane: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// PauseTar returns pause.tar from the folder hack/images.sh prints (it builds the images when
// they are missing).
func PauseTar(log io.Writer) (string, error) {
	script := filepath.Join(RepoRoot(), "hack", "images.sh")
	cmd := exec.Command("bash", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build images (%s): %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return filepath.Join(lines[len(lines)-1], "pause.tar"), nil
}

// Start brings up the cluster (see the package doc) and waits until the node is Ready and the
// default ServiceAccount exists. It waits for the machine's cluster lock until ctx ends.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	o.defaults()
	l := layout{Root: o.Root, Run: o.RunDir}
	if o.Nodes > maxNodes {
		return nil, fmt.Errorf("%d nodes: at most %d fit the pod network", o.Nodes, maxNodes)
	}
	c := &Cluster{NodeName: o.NodeName, Nodes: nodes(o, l), l: l, log: o.Log, Kubeconfig: l.kubeconfig(), KubeletRootDir: l.kubelet()}
	step := func(name string, f func() error) error {
		t0 := time.Now()
		fmt.Fprintf(o.Log, "realcluster: %s...\n", name)
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(o.Log, "realcluster: %s: done in %s\n", name, time.Since(t0).Round(time.Millisecond))
		return nil
	}
	if err := step("take the cluster lock "+LockPath, func() (err error) {
		t0 := time.Now()
		c.lock, err = acquireLock(ctx, o.Log)
		c.LockWait = time.Since(t0)
		return
	}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(o.Log, "realcluster: start failed (%v): tearing down; daemon logs in %s (kept)\n", err, l.logs())
			_ = teardown(l, o.Log, true)
			_ = c.lock.Close()
		}
	}()
	var cp *envtest.ControlPlane
	var ctrPids []int
	steps := []struct {
		name string
		f    func() error
	}{
		{"remove what an earlier run left", func() error { return teardown(l, o.Log, false) }},
		{"find the binaries", func() (err error) { c.Bin, err = Binaries(o.Log); return }},
		{"find the pause image", func() error {
			if o.PauseTar == "" {
				p, err := PauseTar(o.Log)
				if err != nil {
					return err
				}
				o.PauseTar = p
			}
			_, err := os.Stat(o.PauseTar)
			return err
		}},
		{"make the folders, bridge and cgroups", func() error { return prepareHost(l, c.Nodes) }},
		{"start etcd and kube-apiserver", func() (err error) { cp, err = startAPIServer(ctx, l, c.Bin); return }},
		{"write the kubeconfigs", func() error { return c.writeUsers(cp) }},
		{"route the kubernetes Service to the API server", func() error {
			port, err := strconv.Atoi(cp.APIServer.Port)
			if err != nil {
				return err
			}
			return serviceDNAT(netip.AddrPortFrom(Gateway, uint16(port)))
		}},
		{"grant the API server the kubelet API", c.grantKubeletAPI},
		{"start containerd (each node's)", func() error {
			for _, n := range c.Nodes {
				pid, err := c.startNode(ctx, o, n)
				if err != nil {
					return err
				}
				ctrPids = append(ctrPids, pid)
			}
			return nil
		}},
		{"import the pause image", func() error { return c.ImportImage(ctx, o.PauseTar) }},
		{"start kube-controller-manager, kube-scheduler and the kubelets", func() error {
			if err := c.startControllers(o); err != nil {
				return err
			}
			for i, n := range c.Nodes {
				if err := c.startKubelet(o, n, ctrPids[i]); err != nil {
					return err
				}
			}
			return nil
		}},
		{"wait for the nodes to be Ready", func() error { return c.waitReady(ctx) }},
		{"start kube-proxy", func() error { return c.startKubeProxy(ctx, o) }},
	}
	for _, s := range steps {
		if err := step(s.name, s.f); err != nil {
			return nil, err
		}
	}
	c.KubectlPath = filepath.Join(c.Bin, "kubectl")
	fmt.Fprintf(o.Log, "realcluster: %d node(s) Ready; kubeconfig %s\n", len(c.Nodes), c.Kubeconfig)
	return c, nil
}

// Stop tears the cluster down, leaving nothing (see the package doc), and releases the lock;
// anything left is an error.
func (c *Cluster) Stop() error {
	left, err := c.StopAndResidue()
	if err == nil && len(left) > 0 {
		err = fmt.Errorf("left after stop: %s", strings.Join(left, "; "))
	}
	return err
}

// StopAndResidue tears the cluster down and lists what is left (see residue), checked while
// the lock is still held so that the next cluster (another test waiting for the lock) cannot
// be mistaken for leftovers; then it releases the lock.
func (c *Cluster) StopAndResidue() ([]string, error) {
	err := teardown(c.l, c.log, false)
	left := residue(c.l)
	if c.lock != nil {
		_ = c.lock.Close()
		c.lock = nil
	}
	return left, err
}

// ErrBusy means the lock is held by a cluster that a test (Start, not Up) runs; Down leaves it alone.
var ErrBusy = errors.New("a test's cluster holds the lock")

// Down tears down the cluster that Up started (from any process), or removes what a crashed
// run left (holding the lock meanwhile), or does nothing when nothing is there. A cluster a
// test started with Start is not touched: ErrBusy.
func Down(o Options) error {
	o.defaults()
	l := layout{Root: o.Root, Run: o.RunDir}
	f, err := tryLock()
	if err != nil {
		return err
	}
	if f != nil {
		defer f.Close()
		return teardown(l, o.Log, false)
	}
	if !detached(l) {
		return fmt.Errorf("%w (%s): it stops when its test ends", ErrBusy, lockHolders())
	}
	// Up's cluster: its daemons hold the lock. Kill them, then clean up under the lock; if a
	// waiting Start takes the lock first, its own stale cleanup does the rest.
	if _, err := killAll(l); err != nil {
		return err
	}
	var lerr error
	deadline := time.Now().Add(10 * time.Second)
	for f == nil && time.Now().Before(deadline) {
		if f, lerr = tryLock(); lerr != nil {
			return lerr
		}
		if f == nil && !detached(l) {
			fmt.Fprintf(o.Log, "realcluster: another cluster's Start took the lock; it removes the rest\n")
			return nil
		}
		if f == nil {
			time.Sleep(50 * time.Millisecond) // the killed daemons' files close as they exit
		}
	}
	if f == nil {
		return fmt.Errorf("lock still held after killing the cluster (%s)", lockHolders())
	}
	defer f.Close()
	return teardown(l, o.Log, false)
}

// Residue lists what is left on the machine of the cluster at the default (or given) layout,
// and whether some process holds the lock; empty after Down.
func Residue(o Options) []string {
	o.defaults()
	left := residue(layout{Root: o.Root, Run: o.RunDir})
	if lockHeld() {
		left = append(left, "lock: "+LockPath+" held ("+lockHolders()+")")
	}
	return left
}

// Kubectl runs kubectl against the cluster and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.KubectlPath, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	return cmd.CombinedOutput()
}

// ImportImage imports an OCI/Docker image tarball into every node's containerd (namespace
// k8s.io, where the kubelet's images live): ctr -n k8s.io images import.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	for _, n := range c.Nodes {
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.ContainerdSocket, "-n", "k8s.io",
			"images", "import", "--no-unpack=false", tarball).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s (node %s): %w: %s", tarball, n.Name, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

func (c *Cluster) grantKubeletAPI() error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vmlet-cluster:kube-apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: kubeletClientUser}},
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{})
	return err
}

var errTimeout = errors.New("timed out")

// DumpLogs writes the last n lines of each daemon's log to w (for a failing test).
func (c *Cluster) DumpLogs(w io.Writer, n int) {
	ents, _ := os.ReadDir(c.l.logs())
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(c.l.logs(), e.Name()))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(w, "==== %s (last %d lines)\n%s\n", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
}
