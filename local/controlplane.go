package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
}

// ControlPlane is a running etcd + kube-apiserver pair with the CRDs installed.
type ControlPlane struct {
	Config     *rest.Config
	Client     client.Client
	Scheme     *k8sruntime.Scheme
	Kubeconfig string
	env        *envtest.Environment
}

// StartControlPlane starts etcd (data in StateDir/etcd) and kube-apiserver, installs the CRDs,
// waits until they are served, and writes StateDir/kubeconfig for kubectl.
func StartControlPlane(ctx context.Context, o Options) (*ControlPlane, error) {
	if err := os.MkdirAll(filepath.Join(o.StateDir, "etcd"), 0o700); err != nil {
		return nil, fmt.Errorf("make state dir: %w", err)
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
		BinaryAssetsDirectory:    o.AssetsDir,
		CRDDirectoryPaths:        o.CRDDirs,
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(o.StateDir, "etcd"), Out: out, Err: out}
	env.ControlPlane.APIServer = &envtest.APIServer{Out: out, Err: out}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	cp := &ControlPlane{Config: cfg, Scheme: scheme, env: env}
	if cp.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("new client: %w", err)
	}
	if err := cp.writeKubeconfig(o.StateDir); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return cp, ctx.Err()
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

// Stop stops kube-apiserver and etcd; etcd's data stays in the state folder.
func (c *ControlPlane) Stop() error {
	if err := c.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}
