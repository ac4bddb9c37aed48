package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configure the embedded control plane.
type Options struct {
	// StateDir holds etcd's data, the kubeconfig and logs; it persists across runs.
	StateDir string
	// AssetsDir holds kube-apiserver, etcd and kubectl (test/assets/controlplane/build.sh).
	AssetsDir string
	// CRDDirs are folders of CRD manifests to install.
	CRDDirs []string
	// AddToScheme registers the API types the returned client must know.
	AddToScheme []func(*k8sruntime.Scheme) error
	// Log receives the processes' output; nil discards it.
	Log io.Writer
	// APIServerFlags are kube-apiserver flags beyond envtest's (name without "--": value),
	// e.g. the aggregation layer's (subresources.FrontProxyFlags).
	APIServerFlags map[string]string
}

// ControlPlane is a running etcd + kube-apiserver pair with the CRDs installed.
type ControlPlane struct {
	Config     *rest.Config
	Client     client.Client
	Scheme     *k8sruntime.Scheme
	Kubeconfig string
	// Reclaimed are the processes a previous instance left running that this start stopped.
	Reclaimed []ProcessRecord
	env       *envtest.Environment
	stateDir  string
	lock      *stateLock
	stop      chan struct{} // asks the control plane's thread to stop it
	stopped   chan error
}

// dataDirWait is how long a start waits for etcd's data to be released by a leftover it stopped.
const dataDirWait = 30 * time.Second

// StartControlPlane starts etcd (data in StateDir/etcd) and kube-apiserver, installs the CRDs,
// waits until they are served, and writes StateDir/kubeconfig for kubectl.
//
// The state folder is locked for the control plane's lifetime (a second instance fails at once
// with ErrStateDirInUse). Control-plane processes a previous instance recorded and left running
// (it was killed) are stopped first, and the start waits until etcd's data is free. etcd and
// kube-apiserver get a parent-death signal (setpriv --pdeathsig) and are recorded in
// StateDir/controlplane.json (pid, start time, executable) until Stop.
func StartControlPlane(ctx context.Context, o Options) (*ControlPlane, error) {
	dataDir := filepath.Join(o.StateDir, "etcd")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("make state dir: %w", err)
	}
	lock, err := lockStateDir(o.StateDir)
	if err != nil {
		return nil, err
	}
	cp, err := startControlPlane(ctx, o, dataDir)
	if err != nil {
		_ = lock.unlock()
		return nil, err
	}
	cp.lock = lock
	return cp, nil
}

func startControlPlane(ctx context.Context, o Options, dataDir string) (*ControlPlane, error) {
	reclaimed, err := reclaimLeftovers(ctx, o.StateDir, LeftoverGrace)
	if err != nil {
		return nil, err
	}
	wait := time.Second // nothing stopped: a lock held now is someone else's
	if len(reclaimed) > 0 {
		wait = dataDirWait
	}
	if err := waitDataDirFree(ctx, dataDir, wait); err != nil {
		return nil, err
	}
	assets, err := filepath.Abs(o.AssetsDir)
	if err != nil {
		return nil, fmt.Errorf("find control plane binaries: %w", err)
	}
	etcdPath, apiPath, err := writeWrappers(filepath.Join(o.StateDir, "bin"), assets)
	if err != nil {
		return nil, err
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add client-go scheme: %w", err)
	}
	for _, add := range o.AddToScheme {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("add scheme: %w", err)
		}
	}
	out := o.Log
	if out == nil {
		out = io.Discard
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        o.CRDDirs,
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath, DataDir: dataDir, Out: out, Err: out}
	env.ControlPlane.APIServer = &envtest.APIServer{Path: apiPath, Out: out, Err: out}
	// An open watch (kubectl get -w, a dashboard) must not hold the API server's exit, and
	// with it vmlet's, for ControlPlaneStopTimeout: watches are ended at shutdown.
	env.ControlPlane.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "1s")
	for k, v := range o.APIServerFlags {
		env.ControlPlane.APIServer.Configure().Set(k, v)
	}
	cp := &ControlPlane{Scheme: scheme, env: env, stateDir: o.StateDir, Reclaimed: reclaimed,
		stop: make(chan struct{}), stopped: make(chan error, 1)}
	cfg, err := cp.run()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	cp.Config = cfg
	if err := cp.record(assets); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if cp.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("new client: %w", err)
	}
	if err := cp.writeKubeconfig(o.StateDir); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if err := ctx.Err(); err != nil { // stopped while starting
		_ = cp.Stop()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	return cp, nil
}

// run starts the processes from a goroutine locked to its OS thread, which then waits for Stop:
// the parent-death signal fires when the thread that forked a child ends, and Go may end a
// thread of its own accord, so the forking thread must live as long as the control plane.
func (c *ControlPlane) run() (*rest.Config, error) {
	type result struct {
		cfg *rest.Config
		err error
	}
	started := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		cfg, err := c.env.Start()
		started <- result{cfg, err}
		if err != nil {
			_ = c.env.Stop()
			return
		}
		<-c.stop
		c.stopped <- c.env.Stop()
	}()
	r := <-started
	return r.cfg, r.err
}

// record writes the pid, start time and executable of etcd and kube-apiserver.
func (c *ControlPlane) record(assets string) error {
	var rs []ProcessRecord
	for _, name := range []string{"etcd", "kube-apiserver"} {
		ps, err := childrenRunning(filepath.Join(assets, name))
		if err != nil {
			return err
		}
		if len(ps) != 1 {
			return fmt.Errorf("record control plane: %d %s processes started by this vmlet, want 1", len(ps), name)
		}
		r, err := recordOf(name, ps[0])
		if err != nil {
			return fmt.Errorf("record control plane: %w", err)
		}
		rs = append(rs, r)
	}
	return writeRecords(c.stateDir, rs)
}

func (c *ControlPlane) writeKubeconfig(dir string) error {
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: "vmlet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	tmp := c.Kubeconfig + ".tmp"
	if err := os.WriteFile(tmp, kc, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Rename(tmp, c.Kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Stop stops kube-apiserver and etcd (SIGTERM, then SIGKILL after 30 s), removes their record
// and releases the state folder; etcd's data stays in the state folder.
func (c *ControlPlane) Stop() error {
	var errs []error
	if c.stop != nil {
		close(c.stop)
		c.stop = nil
		if err := <-c.stopped; err != nil {
			errs = append(errs, fmt.Errorf("stop control plane: %w", err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, removeRecords(c.stateDir))
	}
	errs = append(errs, c.lock.unlock())
	return errors.Join(errs...)
}
