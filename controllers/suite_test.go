package controllers_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// One real API server per package (envtest from the project's own binaries).
var (
	env            *apienv.Env
	launcherBinary string
	runRoot        string
	cgroupParent   string
	// volumeRoot holds the agents' per-VMI storage folders; imageCache is the image cache the
	// agents share unless a test asks for its own (it stays across VMIs, as on a node).
	volumeRoot string
	imageCache string
	tmpRoot    string
	// cpuGroups is the cpu controller's hierarchy for cgroupParent (the test agents' CPU
	// weights, agentOptions.CPUWeights); nil where the host has none.
	cpuGroups *cpuweight.Hierarchy
	// nodeMachine is the versioned q35 type of this machine's QEMU, as the node agent probes it.
	nodeMachine string
)

// launcherUser is who the test agents' launchers run as: the default of --launcher-uid/gid.
var launcherUser = process.User{UID: process.DefaultUID, GID: process.DefaultGID}

const (
	testNode   = "node-a"
	guestImage = "vmlet.dev/testguest:test"
)

func TestMain(m *testing.M) {
	if req := os.Getenv(probeEnv); req != "" {
		os.Exit(runProbe(req)) // this binary run as a probe (probe_helpers_test.go)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		// make unit: no API server, launcher build, netns or cgroup; the tests that need them
		// skip in their prereq guards, the pure ones run.
		return m.Run()
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	var err error
	env, err = apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start api server:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	tmp, err := os.MkdirTemp("", "vmlet-ctl-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// Like /run and /var/lib: the launchers' user passes through to its own folders.
	if err := os.Chmod(tmp, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	launcherBinary = filepath.Join(tmp, "vmlet-launcher")
	build := exec.Command("go", "build", "-o", launcherBinary, "github.com/vmlet/vmlet/cmd/vmlet-launcher")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build launcher:", err)
		return 1
	}
	if m, err := qemu.DefaultQ35Machine(context.Background(), ""); err == nil {
		nodeMachine = m
	}
	runRoot = filepath.Join(tmp, "run")
	volumeRoot = filepath.Join(tmp, "volumes")
	imageCache = filepath.Join(tmp, "images")
	tmpRoot = tmp
	removeNetns, err := setupNetwork(tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "set up the test node network:", err)
		return 1
	}
	defer func() {
		if err := removeNetns(); err != nil {
			fmt.Fprintln(os.Stderr, "remove test namespaces:", err)
		}
	}()
	if mnt, err := devices.FindCgroup2Mount(); err == nil {
		cgroupParent, err = os.MkdirTemp(mnt, "vmlet-ctl-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.Remove(cgroupParent)
		if h, err := cpuweight.Find(filepath.Base(cgroupParent)); err == nil {
			if err := h.Setup(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			cpuGroups = h
			defer func() {
				_ = h.Teardown()
			}()
		}
	}
	code := m.Run()
	if n := removeLeftoverLaunchers(); n > 0 {
		fmt.Fprintf(os.Stderr, "removed %d launcher(s) left running by failed tests\n", n)
	}
	return code
}

// removeLeftoverLaunchers kills what a failed test left: launchers are deliberately detached from
// the agent (they survive its restarts), so nothing else would stop them.
func removeLeftoverLaunchers() int {
	rt := &process.Runtime{RunRoot: runRoot, CgroupParent: cgroupParent, CPU: cpuGroups}
	ids, _ := rt.List()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range ids {
		if err := rt.Remove(ctx, id); err != nil {
			fmt.Fprintln(os.Stderr, "remove leftover launcher:", err)
		}
	}
	return len(ids)
}

// agent is one running node agent (manager + reconcilers), stoppable to simulate a crash.
type agent struct {
	runtime *process.Runtime
	net     *controllers.NodeNetwork
	r       *controllers.VMIReconciler
	events  *recordedEvents // what the agent's reconciler recorded, as it recorded it
	cancel  context.CancelFunc
	done    chan error
}

// agentOptions configure a test agent's storage. The test guest's kernelBoot image guestImage
// always resolves (to an OCI layout written once per package).
type agentOptions struct {
	// ImageSources maps image references to where the agent pulls them from.
	ImageSources map[string]string
	HostDiskRoot string
	Claims       map[string]storage.Claim
	// ImageCache is the agent's image cache folder; empty means the package's shared one.
	ImageCache string
	// VolumeRoot is the agent's per-VMI storage folder root; empty means the package's
	// volumeRoot (or Node's).
	VolumeRoot string
	// TCGCacheMiB is each TCG guest's translation cache; 0 means launcherpod.DefaultTCGCacheMiB.
	TCGCacheMiB int
	// Subnet6 makes the test node's pod network dual-stack (network.NodeConfig.Subnet6) for
	// this agent. The node bridge exists only while pods do, so agents of later tests get an
	// IPv4-only bridge again.
	Subnet6 netip.Prefix
	// Secondary are the multus networks the node offers (NodeNetwork.Secondary); nil means
	// controllers.DefaultSecondaryNetworks.
	Secondary []string
	// PullBackOff and PullBackOffMax are the agent's image pull back-off; 0: the kubelet's.
	PullBackOff, PullBackOffMax time.Duration
	// Workers is the reconciler's; 0: its default.
	Workers int
	// Trace is the reconciler's (the start-up breakdown of make bench).
	Trace func(uid types.UID, step string, start, end time.Time)
	// CPUWeights gives the agent's launchers CPU weights (process.Runtime.CPU = cpuGroups), as
	// `vmlet local` does; the test process itself stays where it is.
	CPUWeights bool
	// Node is a second test node (migration tests); nil means testNode with the package's run
	// root, volume root and node network.
	Node *testNodeDirs
	// Migration is the agent's migration network; nil: none.
	Migration *controllers.MigrationNet
	// NoScheduler leaves the local scheduler out (a second node's agent).
	NoScheduler bool
	// SELinux is the agent's SELinux labelling (VMIReconciler.SELinux); nil: none.
	SELinux *controllers.NodeSELinux
	// SharedNetns offers controllers.SharedNetwork, a network.Segment whose bridge lives in
	// this namespace (local mode's fabric namespace); empty: not offered.
	SharedNetns string
}

// testNodeDirs are another test node's name, folders and node network.
type testNodeDirs struct {
	Name, RunRoot, VolumeRoot string
	CgroupParent              string // below the package's cgroupParent
	Net                       network.NodeConfig
}

// startAgent runs a node agent and local scheduler for testNode, as `vmlet local` wires them.
func startAgent(t testing.TB, o agentOptions) *agent {
	t.Helper()
	if cgroupParent == "" {
		t.Fatal("no cgroup2 mount")
	}
	sources := map[string]string{guestImage: guestLayout(t)}
	for k, v := range o.ImageSources {
		sources[k] = v
	}
	if o.ImageCache == "" {
		o.ImageCache = imageCache
	}
	if o.TCGCacheMiB == 0 {
		o.TCGCacheMiB = launcherpod.DefaultTCGCacheMiB
	}
	cache, err := oci.Open(oci.Options{Dir: o.ImageCache})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             controllerConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Launchers run as `vmlet agent`'s default user, 107 with no capabilities.
	node, rr, vr, cg := testNode, runRoot, volumeRoot, cgroupParent
	if o.Node != nil {
		node, rr, vr, cg = o.Node.Name, o.Node.RunRoot, o.Node.VolumeRoot, o.Node.CgroupParent
	}
	if o.VolumeRoot != "" {
		vr = o.VolumeRoot
	}
	rt := &process.Runtime{Binary: launcherBinary, RunRoot: rr, CgroupParent: cg, User: launcherUser}
	if o.CPUWeights {
		if cpuGroups == nil {
			prereq.Missing(t, "no cgroup cpu controller for CPU weights")
		}
		rt.CPU = cpuGroups
	}
	nn, err := agentNetwork(o.Subnet6)
	if err != nil {
		t.Fatal(err)
	}
	if o.Node != nil {
		n, err := network.NewNode(o.Node.Net)
		if err != nil {
			t.Fatal(err)
		}
		nn = &controllers.NodeNetwork{Pods: n, ResolvConf: testNet.resolv}
	}
	nn.Secondary = o.Secondary
	if o.SharedNetns != "" {
		seg, err := network.NewSegment(network.SegmentConfig{NetnsPath: o.SharedNetns, NetnsDir: nn.Pods.(*network.Node).Config().NetnsDir, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		nn.Spanning = map[string]controllers.PodInterfaces{controllers.SharedNetwork: seg}
	}
	senv := translate.StorageEnv{HostDiskRoot: o.HostDiskRoot, Claims: o.Claims, ImageSources: sources}
	events := &recordedEvents{EventRecorder: mgr.GetEventRecorder("vmlet-agent")}
	senv.Owner = &storage.Owner{UID: int(launcherUser.UID), GID: int(launcherUser.GID)} // the VMIs' files are the launchers'
	r := &controllers.VMIReconciler{
		Client: mgr.GetClient(), Recorder: events, NodeName: node,
		Runtime: rt, Dial: controllers.DialLauncher, Args: controllers.DefaultLauncherArgs,
		Storage: controllers.NodeStorage{Host: &storage.Host{Images: cache, OnPull: vmimetrics.ObserveImagePull}, Root: vr,
			PullBackOff: o.PullBackOff, PullBackOffMax: o.PullBackOffMax},
		APIReader: mgr.GetAPIReader(),
		Network:   nn,
		Env: func(runDir string) translate.NodeEnv {
			return translate.NodeEnv{RunDir: runDir, Storage: senv, TCGCacheMiB: o.TCGCacheMiB, Machine: nodeMachine}
		},
		Trace:     o.Trace,
		Workers:   o.Workers,
		Migration: o.Migration,
		SELinux:   o.SELinux,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	rt.OnExit = r.WakeByID
	if !o.NoScheduler {
		s := &controllers.LocalScheduler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("sched"), NodeName: testNode,
			NodeLabels: controllers.NodeFacts{}.Labels()}
		if err := s.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{runtime: rt, net: nn, r: r, events: events, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- mgr.Start(ctx) }()
	return a
}

// deleteLeftoverVMIs deletes the VMIs a failed test left, while its agent still runs to tear
// them down, so that the next test's agent does not inherit them (and fail for a reason that
// is not its own). What the agent cannot finalize in time loses its finalizer.
func deleteLeftoverVMIs(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var l vmletv1.VirtualMachineInstanceList
	if err := env.Client.List(ctx, &l); err != nil {
		t.Logf("list leftover VMIs: %v", err)
		return
	}
	for i := range l.Items {
		_ = env.Client.Delete(ctx, &l.Items[i])
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(l.Items) > 0 {
		select {
		case <-ctx.Done():
			for i := range l.Items {
				v := &l.Items[i]
				patch := client.MergeFrom(v.DeepCopy())
				v.Finalizers = nil
				_ = env.Client.Patch(context.Background(), v, patch)
			}
			t.Logf("%d leftover VMI(s) not torn down in time: finalizers removed", len(l.Items))
			return
		case <-tick.C:
		}
		if err := env.Client.List(ctx, &l); err != nil {
			continue
		}
	}
	t.Log("leftover VMIs of the failed test deleted")
}

var guestImageOnce struct {
	sync.Once
	ref string
	err error
}

// guestLayout writes the test guest as a kernelBoot image (kernel /vmlinuz, initrd
// /initramfs.gz, as newVMI names them) into an OCI layout once per package and returns its
// reference.
func guestLayout(t testing.TB) string {
	t.Helper()
	files := testguest.Assets(t)
	guestImageOnce.Do(func() {
		guestImageOnce.ref, guestImageOnce.err = guestvmi.Layout(files, tmpRoot)
	})
	if guestImageOnce.err != nil {
		t.Fatalf("write the test guest's image: %v", guestImageOnce.err)
	}
	return guestImageOnce.ref
}

func (a *agent) stop(t testing.TB) {
	t.Helper()
	if t.Failed() {
		deleteLeftoverVMIs(t)
	}
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("manager: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("manager did not stop")
	}
	// As with an agent process that exits (the launchers keep serving DHCP).
	if err := a.net.Close(); err != nil {
		t.Errorf("close agent network: %v", err)
	}
}

// controllerConfig allows several managers in one process: the agent-restart test starts a
// second agent with controllers of the same names.
func controllerConfig() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)}
}

func zapLevel() zapcore.Level {
	if os.Getenv("VMLET_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}
