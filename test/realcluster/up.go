package realcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// ContainerdSocket is the first node's containerd socket (ctr --address).
func (c *Cluster) ContainerdSocket() string { return c.l.ctrSocket() }

// Up starts a detached cluster unless one is already up and healthy at the layout (then it
// returns that one, reused true): `vmlet-cluster up` twice gives one cluster. A cluster that is
// only partly there (some daemon died) is torn down and started again.
func Up(ctx context.Context, o Options) (c *Cluster, reused bool, err error) {
	o.defaults()
	l := layout{Root: o.Root, Run: o.RunDir}
	if lockHeld() && detached(l) {
		c, err := attach(ctx, l, o)
		if err == nil {
			return c, true, nil
		}
		fmt.Fprintf(o.Log, "realcluster: the cluster that holds the lock is not healthy (%v): replacing it\n", err)
		if err := teardown(l, o.Log, true); err != nil {
			return nil, false, err
		}
	}
	c, err = Start(ctx, o)
	if err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(l.detachedMark(), []byte("vmlet-cluster up\n"), 0o600); err != nil {
		return nil, false, err
	}
	// The daemons hold the lock now; this process lets go of its copy.
	_ = c.lock.Close()
	c.lock = nil
	return c, false, nil
}

// detached reports whether the cluster at l was started by Up (not by a test's Start).
func detached(l layout) bool {
	_, err := os.Stat(l.detachedMark())
	return err == nil
}

// attach returns the running cluster at l if its API server answers and the node is Ready.
func attach(ctx context.Context, l layout, o Options) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig())
	if err != nil {
		return nil, err
	}
	bin, err := Binaries(o.Log)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Kubeconfig: l.kubeconfig(), Config: cfg, NodeName: o.NodeName, Nodes: nodes(o, l), Bin: bin,
		KubectlPath: filepath.Join(bin, "kubectl"), KubeletRootDir: l.kubelet(), l: l, log: o.Log}
	for _, n := range c.Nodes {
		for _, p := range []string{n.l.ctrSocket(), n.l.kubeletConfig()} {
			if _, err := os.Stat(p); err != nil {
				return nil, err
			}
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf("API server /readyz: %w: %s", err, b)
	}
	for _, n := range c.Nodes {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.kubeletHealth()))
		if err != nil {
			return nil, fmt.Errorf("%s kubelet healthz: %w", n.Name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s kubelet healthz: %s", n.Name, resp.Status)
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// UpRunning reports whether the cluster at o's layout was started by Up and still holds the
// lock (so `vmlet-cluster down` may undeploy from it; a test's cluster is never touched).
func UpRunning(o Options) bool {
	o.defaults()
	return lockHeld() && detached(layout{Root: o.Root, Run: o.RunDir})
}
