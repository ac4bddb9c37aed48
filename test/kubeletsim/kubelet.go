package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/network"
)

// Kubelet runs the pods bound to NodeName.
type Kubelet struct {
	Client   client.Client
	NodeName string
	// Binaries maps a container's command[0] to the program run for it (no images here).
	Binaries map[string]string
	// CgroupParent is the cgroup-v2 folder holding one cgroup per pod.
	CgroupParent string
	// Network is the CNI: each pod gets a network namespace with eth0 from it.
	Network *network.Node
	// LogDir receives one <pod uid>.log per container.
	LogDir string
	// Devices are the device plugin resources the Node's status advertises (DeviceCount each,
	// deviceplugin.DefaultCount when 0); nil: what the node agent's device plugin advertises on
	// this machine (deviceplugin.Select of deviceplugin.Probe). The pods do not get the device
	// nodes: they run on the host's /dev, filtered by the agent's device program.
	Devices     []string
	DeviceCount int
	// HostRoot is the folder that stands for this node's root filesystem: a hostPath volume's
	// path P is HostRoot/P here, so that two simulated nodes on one machine have their own
	// hostPath folders (their agents are given the same roots under HostRoot). Empty: the
	// machine's own paths. Claims' paths (claims.go) are not moved: they are shared storage.
	HostRoot string

	mu     sync.Mutex
	pods   map[types.UID]*podProc
	events chan event.TypedGenericEvent[*corev1.Pod]
}

// podProc is one pod's running (or ended) container.
type podProc struct {
	key     client.ObjectKey
	cmd     *exec.Cmd
	cg      *devices.Cgroup
	done    chan struct{}
	exit    *corev1.ContainerStateTerminated
	started metav1.Time
	termAt  time.Time // when SIGTERM was sent for a deletion
}

// SetupWithManager registers the kubelet.
func (k *Kubelet) SetupWithManager(mgr ctrl.Manager) error {
	k.pods = map[types.UID]*podProc{}
	k.events = make(chan event.TypedGenericEvent[*corev1.Pod], 64)
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName == k.NodeName
	})
	if err := k.setupDevices(mgr); err != nil {
		return err
	}
	if err := k.setupNodeLifecycle(mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-kubelet").
		For(&corev1.Pod{}, builder.WithPredicates(onNode)).
		WatchesRawSource(source.Channel(k.events, &handler.TypedEnqueueRequestForObject[*corev1.Pod]{})).
		Complete(k)
}

// Reconcile starts, reports, stops and finally deletes one pod.
func (k *Kubelet) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	err := k.Client.Get(ctx, req.NamespacedName, pod)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, k.forget(ctx, req.NamespacedName)
	}
	if err != nil || pod.Spec.NodeName != k.NodeName {
		return ctrl.Result{}, err
	}
	k.mu.Lock()
	p := k.pods[pod.UID]
	k.mu.Unlock()
	switch {
	case !pod.DeletionTimestamp.IsZero():
		return k.terminate(ctx, pod, p)
	case p == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
		return ctrl.Result{}, nil
	case p == nil:
		return ctrl.Result{}, k.start(ctx, pod)
	case p.ended() && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
		if err := k.cleanup(ctx, pod.UID, p); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, k.reportEnded(ctx, pod, p)
	}
	return ctrl.Result{}, nil
}

func (p *podProc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start runs the pod's only container. Equivalent to what CRI + CNI do for a pod.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) (err error) {
	if len(pod.Spec.Containers) != 1 {
		return fmt.Errorf("pod %s: kubeletsim runs exactly one container", pod.Name)
	}
	c := pod.Spec.Containers[0]
	bin := k.Binaries[firstOf(c.Command)]
	if bin == "" {
		return fmt.Errorf("pod %s: no binary for command %q", pod.Name, c.Command)
	}
	paths, err := hostPaths(pod, c, k.HostRoot)
	if err != nil {
		return err
	}
	if err := k.claims(ctx, pod, c, paths); err != nil {
		return err
	}
	uid := string(pod.UID)
	pn, err := k.Network.CreatePod(uid)
	if err != nil {
		return fmt.Errorf("pod %s: CNI add: %w", pod.Name, err)
	}
	defer func() {
		if err != nil {
			_ = k.Network.DeletePod(uid)
		}
	}()
	cg, err := devices.NewCgroup(k.CgroupParent, "pod-"+uid)
	if err != nil {
		return fmt.Errorf("pod %s: make cgroup: %w", pod.Name, err)
	}
	logf, err := os.Create(filepath.Join(k.LogDir, uid+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--net=" + pn.NetnsPath, "--"}, containerUser(pod, c)...)
	args = append(append(args, bin), translate(c.Args, paths)...)
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cg.Start(cmd); err != nil {
		_ = cg.Remove(ctx)
		return fmt.Errorf("pod %s: start container: %w", pod.Name, err)
	}
	p := &podProc{key: client.ObjectKeyFromObject(pod), cmd: cmd, cg: cg, done: make(chan struct{}), started: metav1.Now()}
	k.mu.Lock()
	k.pods[pod.UID] = p
	k.mu.Unlock()
	go k.reap(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}, p)
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: pn.Addr.Addr().String(), HostIP: pn.Gateway.String(), StartTime: &p.started,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true, Started: ptrTo(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: p.started}}}},
	}
	if err := k.Client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("pod %s: report running: %w", pod.Name, err)
	}
	return nil
}

// reap owns cmd.Wait and records the container's end as a kubelet reports it; ref names the pod.
func (k *Kubelet) reap(ref *corev1.Pod, p *podProc) {
	_ = p.cmd.Wait()
	code := p.cmd.ProcessState.ExitCode()
	t := &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Completed", StartedAt: p.started, FinishedAt: metav1.Now()}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.ExitCode = 128 + int32(ws.Signal())
	}
	if t.ExitCode != 0 {
		t.Reason = "Error"
	}
	k.mu.Lock()
	p.exit = t
	k.mu.Unlock()
	close(p.done)
	k.events <- event.TypedGenericEvent[*corev1.Pod]{Object: ref}
}

func (k *Kubelet) reportEnded(ctx context.Context, pod *corev1.Pod, p *podProc) error {
	k.mu.Lock()
	t := *p.exit
	k.mu.Unlock()
	pod.Status.Phase = corev1.PodSucceeded
	if t.ExitCode != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		cs.Ready, cs.Started = false, ptrTo(false)
		cs.State = corev1.ContainerState{Terminated: &t}
	}
	if err := k.Client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("pod %s: report ended: %w", pod.Name, err)
	}
	return nil
}

// terminate handles a graceful deletion: SIGTERM, SIGKILL after the grace period, then the
// final delete with grace 0 (what lets the API server remove a bound pod).
func (k *Kubelet) terminate(ctx context.Context, pod *corev1.Pod, p *podProc) (ctrl.Result, error) {
	if p != nil && !p.ended() {
		grace := 30 * time.Second
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		k.mu.Lock()
		first := p.termAt.IsZero()
		if first {
			p.termAt = time.Now()
		}
		left := grace - time.Since(p.termAt)
		k.mu.Unlock()
		switch {
		case first:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		case left <= 0:
			_ = p.cmd.Process.Kill()
		}
		return ctrl.Result{RequeueAfter: max(left, 0) + 100*time.Millisecond}, nil // its exit also wakes us
	}
	if p != nil {
		if err := k.cleanup(ctx, pod.UID, p); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := k.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("pod %s: finish deletion: %w", pod.Name, err)
	}
	k.mu.Lock()
	delete(k.pods, pod.UID)
	k.mu.Unlock()
	return ctrl.Result{}, nil
}

// cleanup removes an ended pod's sandbox: cgroup and network.
func (k *Kubelet) cleanup(ctx context.Context, uid types.UID, p *podProc) error {
	if err := p.cg.Remove(ctx); err != nil {
		return fmt.Errorf("remove pod cgroup: %w", err)
	}
	if err := k.Network.DeletePod(string(uid)); err != nil {
		return fmt.Errorf("CNI del: %w", err)
	}
	return nil
}

// forget kills and cleans up after a pod removed from the API (force deletion).
func (k *Kubelet) forget(ctx context.Context, key client.ObjectKey) error {
	k.mu.Lock()
	var uid types.UID
	var p *podProc
	for u, q := range k.pods {
		if q.key == key {
			uid, p = u, q
		}
	}
	delete(k.pods, uid)
	k.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return k.cleanup(ctx, uid, p)
}

// Stop kills every container and removes the sandboxes (end of a test).
func (k *Kubelet) Stop(ctx context.Context) error {
	k.mu.Lock()
	ps := k.pods
	k.pods = map[types.UID]*podProc{}
	k.mu.Unlock()
	var errs []error
	for uid, p := range ps {
		_ = p.cmd.Process.Kill()
		<-p.done
		errs = append(errs, k.cleanup(ctx, uid, p))
	}
	return errors.Join(errs...)
}

// hostPaths maps the container's hostPath mount paths to their folders (under root), making
// DirectoryOrCreate folders.
func hostPaths(pod *corev1.Pod, c corev1.Container, root string) (map[string]string, error) {
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath
		}
	}
	m := map[string]string{}
	for _, vm := range c.VolumeMounts {
		src := vols[vm.Name]
		if src == nil {
			continue // a claim (claims resolves it)
		}
		hp := src.DeepCopy()
		hp.Path = filepath.Join("/", root, hp.Path)
		switch {
		case hp.Type != nil && *hp.Type == corev1.HostPathDirectoryOrCreate:
			if err := os.MkdirAll(hp.Path, 0o755); err != nil {
				return nil, err
			}
		case hp.Type != nil && *hp.Type == corev1.HostPathDirectory:
			// A kubelet reports FailedMount and retries; so does this one (the error requeues).
			if fi, err := os.Stat(hp.Path); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("pod %s: volume %s: hostPath type check failed: %s is not a directory", pod.Name, vm.Name, hp.Path)
			}
		}
		m[vm.MountPath] = hp.Path
	}
	return m, nil
}

// containerUser is the command prefix that applies the container's security context as runc
// would: runAsUser/runAsGroup (the container's over the pod's) with no supplementary groups,
// capabilities dropped (ALL: empty bounding and inheritable sets; a non-root user has no other
// capabilities) and no_new_privs for allowPrivilegeEscalation false. Nothing for a root pod
// that asks for none of it.
//
// Equivalent to: setpriv --reuid U --regid G --clear-groups --bounding-set -all --inh-caps -all --nnp --
func containerUser(pod *corev1.Pod, c corev1.Container) []string {
	var uid, gid *int64
	if ps := pod.Spec.SecurityContext; ps != nil {
		uid, gid = ps.RunAsUser, ps.RunAsGroup
	}
	sc := c.SecurityContext
	if sc != nil && sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if sc != nil && sc.RunAsGroup != nil {
		gid = sc.RunAsGroup
	}
	var args []string
	if uid != nil {
		args = append(args, "--reuid", strconv.FormatInt(*uid, 10))
	}
	if gid != nil {
		args = append(args, "--regid", strconv.FormatInt(*gid, 10), "--clear-groups")
	}
	if sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") {
		args = append(args, "--bounding-set", "-all", "--inh-caps", "-all")
	}
	if sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--nnp")
	}
	if len(args) == 0 {
		return nil
	}
	return append(append([]string{"setpriv"}, args...), "--")
}

// translate rewrites arguments naming a mount path (or a path beneath it) to the host path.
func translate(args []string, paths map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		for mp, hp := range paths {
			if a == mp || strings.HasPrefix(a, mp+"/") {
				out[i] = hp + strings.TrimPrefix(a, mp)
			}
		}
	}
	return out
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func ptrTo[T any](v T) *T { return &v }
