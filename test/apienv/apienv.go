package apienv

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vmlet/vmlet/controllers/subresources"
)

// Env is a running API server with vmlet's CRDs installed.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme
	// Kubeconfig is a kubeconfig file for kubectl against this server.
	Kubeconfig string
	// KubectlPath is the kubectl built with the control plane.
	KubectlPath string

	env    *envtest.Environment
	dir    string
	pkiDir string
	// stateDir holds etcd's data and the API server's certificates, kept across restarts.
	stateDir string
}

// Options tune Start.
type Options struct {
	// Scheme registers the API types the client must know; clientgoscheme is always added.
	AddToScheme []func(*k8sruntime.Scheme) error
	// CRDPaths overrides the CRD directories (default: config/crd/bases of this repo).
	CRDPaths []string
	// Aggregation starts kube-apiserver with the aggregation layer on (front-proxy CA and
	// proxy client certificate, subresources.FrontProxyFlags), so that an APIService can be
	// served by a test's in-process server.
	Aggregation bool
}

// RepoRoot returns the repository root (the folder holding the main go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ErrShort is returned under -short: `make unit` starts no API server, so a test that gets
// here lacks its prereq.APIServer guard (or its TestMain its testing.Short check).
var ErrShort = errors.New("apienv: no API server under -short (make unit): guard the test with prereq.APIServer")

// short reports whether the test binary runs with -short. TestMain runs before the testing
// flags are parsed: parse them here (m.Run then does not parse them again).
func short() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// ControlPlaneAssets builds (or finds cached) kube-apiserver, etcd and kubectl and returns their
// folder. The first build on a machine takes ≈10 min; the script prints progress to stderr.
//
// Under -short (make unit) it refuses with ErrShort: the test lacks a prereq.APIServer guard.
func ControlPlaneAssets() (string, error) {
	if short() {
		return "", ErrShort
	}
	assetsOnce.Do(func() {
		if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
			assetsDir = d
			return
		}
		script := filepath.Join(RepoRoot(), "test", "assets", "controlplane", "build.sh")
		var out bytes.Buffer
		cmd := exec.Command("bash", script)
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			assetsErr = fmt.Errorf("build control plane: %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		assetsDir = lines[len(lines)-1]
	})
	return assetsDir, assetsErr
}

// Start builds/finds the binaries, starts etcd + kube-apiserver and installs the CRDs. Under
// -short it refuses with ErrShort (see ControlPlaneAssets).
func Start(opts Options) (*Env, error) {
	dir, err := ControlPlaneAssets()
	if err != nil {
		return nil, err
	}
	crds := opts.CRDPaths
	if len(crds) == 0 {
		crds = []string{filepath.Join(RepoRoot(), "config", "crd", "bases")}
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add client-go scheme: %w", err)
	}
	for _, add := range opts.AddToScheme {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("add scheme: %w", err)
		}
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
		// envtest's 20 s was too short for kube-apiserver on a loaded 2-core machine (CI saw
		// five timed-out tries in a row while TCG guests ran beside it).
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	// etcd's data and the API server's certificates live in folders of our own, so that
	// StopAPIServer/StartAPIServer and RestartEtcd keep the objects, the serving certificate
	// and the client CA (envtest removes folders it made itself on every stop).
	stateDir, err := os.MkdirTemp("", "vmlet-apienv-state-")
	if err != nil {
		return nil, fmt.Errorf("make state dir: %w", err)
	}
	te.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(stateDir, "etcd")}
	te.ControlPlane.APIServer = &envtest.APIServer{CertDir: filepath.Join(stateDir, "apiserver")}
	// Open watches (the agents' informers) are ended at a stop instead of holding it (as in
	// local mode's control plane).
	te.ControlPlane.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "1s")
	for _, d := range []string{te.ControlPlane.Etcd.DataDir, te.ControlPlane.APIServer.CertDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			_ = os.RemoveAll(stateDir)
			return nil, fmt.Errorf("make state dir: %w", err)
		}
	}
	var pkiDir string
	if opts.Aggregation {
		if pkiDir, err = os.MkdirTemp("", "vmlet-apienv-pki-"); err != nil {
			_ = os.RemoveAll(stateDir)
			return nil, fmt.Errorf("make front proxy dir: %w", err)
		}
		flags, err := subresources.FrontProxyFlags(pkiDir)
		if err != nil {
			_ = os.RemoveAll(stateDir)
			return nil, err
		}
		for k, v := range flags {
			te.ControlPlane.APIServer.Configure().Set(k, v)
		}
	}
	cfg, err := te.Start()
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	e := &Env{Config: cfg, Scheme: scheme, env: te, KubectlPath: filepath.Join(dir, "kubectl"), pkiDir: pkiDir, stateDir: stateDir}
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = te.Stop()
		_ = os.RemoveAll(stateDir)
		return nil, fmt.Errorf("new client: %w", err)
	}
	if err := e.writeKubeconfig(); err != nil {
		_ = te.Stop()
		_ = os.RemoveAll(stateDir)
		return nil, err
	}
	return e, nil
}

// StartT is Start for one test: a failed start fails it, and the environment stops when it
// ends (a failed stop fails it too). Guard it with prereq.APIServer.
func StartT(tb testing.TB, opts Options) *Env {
	tb.Helper()
	env, err := Start(opts)
	if err != nil {
		tb.Fatalf("start api server: %v", err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Errorf("stop api server: %v", err)
		}
	})
	return env
}

func (e *Env) writeKubeconfig() error {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: "vmlet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add kubeconfig user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if e.dir, err = os.MkdirTemp("", "vmlet-apienv-"); err != nil {
		return fmt.Errorf("make kubeconfig dir: %w", err)
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kc, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Kubectl runs the control plane's kubectl against this server and returns combined output.
func (e *Env) Kubectl(args ...string) ([]byte, error) {
	cmd := exec.Command(e.KubectlPath, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	return cmd.CombinedOutput()
}

// Stop stops the API server and etcd and removes their data.
func (e *Env) Stop() error {
	var errs []error
	if err := e.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stop envtest: %w", err))
	}
	for _, d := range []string{e.dir, e.pkiDir, e.stateDir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StopAPIServer kills kube-apiserver (SIGKILL: a crash; with clients watching, its graceful
// shutdown on SIGTERM can take minutes) and waits until it has exited; etcd keeps running
// and the data stays. Clients then get "connection refused" until StartAPIServer.
func (e *Env) StopAPIServer() error {
	as := e.env.ControlPlane.APIServer
	pid, err := pidWithArg("--cert-dir=" + as.CertDir)
	if err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("stop kube-apiserver: kill %d: %w", pid, err)
	}
	if err := as.Stop(); err != nil { // reaps it
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	return nil
}

// pidWithArg is the process that has arg among its arguments.
func pidWithArg(arg string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), arg) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process with argument %s", arg)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same address with the
// same serving certificate and client CA (Config and Kubeconfig stay valid), and waits until it
// is healthy.
func (e *Env) StartAPIServer() error {
	if err := e.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	return nil
}

// RestartEtcd stops etcd (SIGTERM) and starts it again on the same address and data folder;
// kube-apiserver keeps running and reconnects.
func (e *Env) RestartEtcd() error {
	et := e.env.ControlPlane.Etcd
	if err := et.Stop(); err != nil {
		return fmt.Errorf("stop etcd: %w", err)
	}
	if err := et.Start(); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	return nil
}

// GVK is a small helper for tests building unstructured objects.
func GVK(group, version, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}
