package cluster_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
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
	"github.com/vmlet/vmlet/controllers/cluster"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// One real API server (kube-apiserver + etcd, no kubelet, scheduler or garbage collector) for
// the package: the tests play kube-scheduler and the kubelet by writing what they would.
var env *apienv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // make unit: the API tests skip in prereq.APIServer, the pure ones run
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var err error
	env, err = apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start api server:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop api server:", err)
	}
	os.Exit(code)
}

const wait = time.Minute // generous: 2 shared cores, QEMU tests next door

// agentGrace is the tests' Reconciler.AgentGrace (no node agent runs here).
const agentGrace = 3 * time.Second

// testPods are the launcher pod options of the tests.
var testPods = launcherpod.Options{
	Image: "vmlet-launcher:test", LauncherRoot: "/run/vl", VolumeRoot: "/var/lib/vl", AllowEmulation: true,
	TCGCacheMiB: launcherpod.DefaultTCGCacheMiB, Args: controllers.DefaultLauncherArgs, DomainName: translate.DomainName,
}

var managers atomic.Int32

// startController runs the cluster controller in a manager until the returned stop (also
// registered with t.Cleanup) is called.
func startController(t *testing.T) (stop func()) {
	t.Helper()
	prereq.APIServer(t)
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Cache:                  cluster.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &cluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder(fmt.Sprintf("vmlet-controller-%d", managers.Add(1))), Pods: testPods,
		AgentGrace: agentGrace}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(wait):
			t.Error("manager did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	prereq.APIServer(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newVMI(t *testing.T, ns, name string, mutate func(*vmletv1.VirtualMachineInstance)) *vmletv1.VirtualMachineInstance {
	t.Helper()
	guest := resource.MustParse("256Mi")
	vmi := &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       vmletv1.VirtualMachineInstanceSpec{Domain: vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: &guest}}},
	}
	if mutate != nil {
		mutate(vmi)
	}
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	return vmi
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s; last seen: %s", what, wait, seen)
		}
		<-tick.C
	}
}

func getVMI(t *testing.T, vmi *vmletv1.VirtualMachineInstance) *vmletv1.VirtualMachineInstance {
	t.Helper()
	got := &vmletv1.VirtualMachineInstance{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(vmi), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// waitVMI waits until the VMI satisfies ok.
func waitVMI(t *testing.T, vmi *vmletv1.VirtualMachineInstance, what string, ok func(*vmletv1.VirtualMachineInstance) bool) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	eventually(t, vmi.Name+" "+what, func() (bool, string) {
		got = getVMI(t, vmi)
		return ok(got), summary(got)
	})
	return got
}

func summary(v *vmletv1.VirtualMachineInstance) string {
	var b strings.Builder
	b.WriteString("phase=" + string(v.Status.Phase) + " reason=" + v.Status.Reason + " node=" + v.Status.NodeName)
	for _, c := range v.Status.Conditions {
		b.WriteString(" " + c.Type + "=" + string(c.Status) + "(" + c.Reason + ": " + c.Message + ")")
	}
	return b.String()
}

// podsOf lists the VMI's launcher pods from the API server.
func podsOf(t *testing.T, vmi *vmletv1.VirtualMachineInstance) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(vmi.Namespace), launcherpod.MatchingVMI(vmi.UID)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitPod waits for the VMI's one launcher pod.
func waitPod(t *testing.T, vmi *vmletv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, vmi.Name+" launcher pod", func() (bool, string) {
		pods := podsOf(t, vmi)
		if len(pods) > 1 {
			t.Fatalf("%d launcher pods for %s", len(pods), vmi.Name)
		}
		if len(pods) == 1 {
			pod = &pods[0]
		}
		return pod != nil, "no pod"
	})
	return pod
}

// waitPodGone waits until the pod is deleted: gone, or terminating (a bound pod waits for its
// kubelet, and there is none here).
func waitPodGone(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	eventually(t, "pod "+pod.Name+" deleted", func() (bool, string) {
		p := &corev1.Pod{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p)
		if err != nil {
			return client.IgnoreNotFound(err) == nil, err.Error()
		}
		return !p.DeletionTimestamp.IsZero(), "still there"
	})
}

// waitEvent waits for an Event of type and reason about the VMI and returns its note.
func waitEvent(t *testing.T, vmi *vmletv1.VirtualMachineInstance, typ, reason string) string {
	t.Helper()
	var note string
	eventually(t, typ+" event "+reason, func() (bool, string) {
		var l eventsv1.EventList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(vmi.Namespace)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range l.Items {
			if e.Regarding.UID == vmi.UID && e.Type == typ && e.Reason == reason {
				note = e.Note
				return true, ""
			}
			seen = append(seen, e.Type+"/"+e.Reason)
		}
		return false, fmt.Sprint(seen)
	})
	return note
}
