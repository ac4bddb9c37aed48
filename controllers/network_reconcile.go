package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// PodNetworks gives every launcher its pod network: a network namespace with the pod
// interface (eth0) that the VMI's bindings attach to. network.Node implements it in local
// mode, where vmlet acts as the CNI.
type PodNetworks interface {
	// CreatePod creates pod id's network or returns the existing one (idempotent).
	CreatePod(id string) (network.PodNetwork, error)
	// DeletePod removes it (idempotent).
	DeletePod(id string) error
	PodInterfaces
}

// PodInterfaces adds pods' interfaces on a secondary network: Multus's job in a cluster.
// network.Node implements it for its own bridge, network.Segment for a network every node of
// the machine shares.
type PodInterfaces interface {
	// AddInterface gives pod id an additional interface ifname (idempotent).
	AddInterface(id, ifname string) (network.PodNetwork, error)
	// RemoveInterface removes it (idempotent).
	RemoveInterface(id, ifname string) error
	// Interfaces lists pod id's additional interfaces.
	Interfaces(id string) ([]string, error)
}

var (
	_ PodNetworks   = (*network.Node)(nil)
	_ PodInterfaces = (*network.Segment)(nil)
)

// SharedNetwork is the multus network local mode's nodes share when there are several
// (network.Segment in the fabric namespace): an interface on it keeps its address and MAC on
// every node, so a VMI attached to it migrates.
const SharedNetwork = "vmlet-shared"

// DefaultSecondaryNetworks is the multus network a local-mode node offers: its node bridge.
var DefaultSecondaryNetworks = []string{"vmlet-node"}

// errNoPodNetwork: the agent was started without a pod network.
var errNoPodNetwork = errors.New("this node has no pod network")

// NodeNetwork is the node agent's network side: pod networks and, per VMI, the bindings in
// its pod's netns, by VMI UID; after an agent restart the reconciler attaches running VMIs
// again (the kernel state is found and kept). DHCP does not run here: the agent binds each
// interface's DHCP sockets in the pod's netns and hands them with the lease plan to the VM's
// launcher (ensureDHCP), which serves them while the agent restarts. Use one per agent
// process.
type NodeNetwork struct {
	// Pods creates and deletes the launchers' pod networks.
	Pods PodNetworks
	// ResolvConf is the resolv.conf whose nameservers and search domains DHCP offers the
	// guests (loopback servers are dropped); empty means /etc/resolv.conf.
	ResolvConf string
	// Secondary are the multus network names this node's pods can be attached to (an
	// additional pod interface on the node bridge, PodNetworks.AddInterface); nil means
	// DefaultSecondaryNetworks. A "namespace/" prefix of a VMI's networkName is ignored.
	Secondary []string
	// Spanning are multus networks, by name, that span the nodes: an interface on one keeps
	// its address and MAC on every node (the pod of the same VMI on another node gets them),
	// so a VMI attached to them can migrate. Local mode with several nodes offers
	// SharedNetwork.
	Spanning map[string]PodInterfaces

	mu       sync.Mutex
	attached map[types.UID]*vmiAttachment
}

// vmiAttachment is one VMI's wired network.
type vmiAttachment struct {
	*network.Attachment
	netns string // the pod's network namespace
}

// attach returns the VMI's attachment, creating its pod network and wiring spec on first use
// (and again in a new agent process: both steps are idempotent). onLease runs whenever a DHCP
// server in this process (for a launcher that cannot serve DHCP) acknowledges an address.
func (n *NodeNetwork) attach(uid types.UID, spec *network.Spec, onLease func(), logger *slog.Logger) (*vmiAttachment, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a := n.attached[uid]; a != nil {
		return a, nil
	}
	pod, err := n.Pods.CreatePod(string(uid))
	if err != nil {
		return nil, fmt.Errorf("create pod network: %w", err)
	}
	s := *spec
	s.ResolvConf = n.ResolvConf
	att, err := network.Attach(pod.NetnsPath, &s, network.AttachOptions{OnLease: func(network.Lease) { onLease() }, Logger: logger})
	if err != nil {
		return nil, err // the pod network goes with the VMI (release)
	}
	if n.attached == nil {
		n.attached = map[types.UID]*vmiAttachment{}
	}
	a := &vmiAttachment{Attachment: att, netns: pod.NetnsPath}
	n.attached[uid] = a
	return a, nil
}

// attachment returns the VMI's attachment, nil if this process has none.
func (n *NodeNetwork) attachment(uid types.UID) *vmiAttachment {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attached[uid]
}

// release detaches the VMI's bindings (taps, bridges and tables go) and
// deletes its pod network; when it was the last pod, the node bridge and NAT go too. It is
// idempotent and works without an attachment in this process (after an agent restart): the
// pod's netns takes what is left in it along.
func (n *NodeNetwork) release(uid types.UID) error {
	n.mu.Lock()
	a := n.attached[uid]
	delete(n.attached, uid)
	n.mu.Unlock()
	var errs []error
	if a != nil {
		if err := a.Detach(); err != nil {
			errs = append(errs, fmt.Errorf("detach network: %w", err))
		}
	}
	for name, sp := range n.Spanning {
		// Before the pod's netns goes: the veth's host end is outside it.
		errs = append(errs, removeInterfaces(sp, string(uid), name))
	}
	if err := n.Pods.DeletePod(string(uid)); err != nil {
		errs = append(errs, fmt.Errorf("delete pod network: %w", err))
	}
	return errors.Join(errs...)
}

// Close forgets every attachment; the kernel state and the launchers' DHCP services stay.
// The agent calls it when it stops.
func (n *NodeNetwork) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for uid, a := range n.attached {
		errs = append(errs, a.Close())
		delete(n.attached, uid)
	}
	return errors.Join(errs...)
}

// ensureNetwork wires the VMI's network (want.Network) before its domain is synced (on every
// reconcile: cheap once attached) and returns the NICs to start the domain with (planned,
// resolved from the binding plan) and the namespaces of their taps. A VMI without interfaces
// gets no pod network.
func (r *VMIReconciler) ensureNetwork(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, want *translate.Desired, planned []qemu.NIC) ([]qemu.NIC, launcher.NetNS, error) {
	if want.Network == nil {
		return nil, nil, nil
	}
	if r.Network == nil || r.Network.Pods == nil {
		return nil, nil, fmt.Errorf("attach interface %q: %w", want.Network.Interfaces[0].Name, errNoPodNetwork)
	}
	ns, name := vmi.Namespace, vmi.Name
	logger := slog.New(logr.ToSlogHandler(log.FromContext(ctx).WithValues("vmi", ns+"/"+name)))
	boot := want.BootNetwork()
	a, err := r.Network.attach(vmi.UID, boot, func() { r.Wake(ns, name) }, logger)
	if err != nil {
		return nil, nil, err
	}
	plan := a.Plan()
	plan.Interfaces = slices.DeleteFunc(plan.Interfaces, func(ip network.InterfacePlan) bool {
		return !slices.ContainsFunc(boot.Interfaces, func(i network.Interface) bool { return i.Name == ip.Name })
	})
	return translate.ResolveNICs(planned, plan, a.netns)
}

// launcherDHCP is what a launcher reported of its DHCP services (DomainState).
type launcherDHCP struct {
	supported bool     // it takes hand-overs
	served    []string // the interfaces it serves
}

// ensureDHCP makes the launcher serve DHCP on the VMI's attached interfaces: it binds the
// sockets of each interface the launcher does not serve yet (st.served) in the pod's netns and
// hands them over with the interface's lease plan; with prune it also stops the services of
// interfaces not attached (only once every wanted interface is: an agent restarted since a NIC
// was hotplugged attaches it again in reconcileNICs). It returns what the launcher serves
// afterwards. Level-based: after an agent restart the launcher's services are found and kept.
// A launcher that takes no hand-overs (one started before launchers served DHCP) has its
// VM's DHCP served in this process instead, as it was then.
func (r *VMIReconciler) ensureDHCP(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, st launcherDHCP, prune bool) (launcherDHCP, error) {
	a := r.Network.attachment(vmi.UID)
	if a == nil {
		return st, nil
	}
	var want []string
	for _, ip := range a.Plan().Interfaces {
		want = append(want, ip.Name)
	}
	host, ok := l.(DHCPHost)
	if !ok || !st.supported {
		var errs []error
		for _, name := range want {
			errs = append(errs, a.ServeInProcess(name))
		}
		return st, errors.Join(errs...)
	}
	served := st.served
	var errs []error
	out := slices.Clone(served)
	for _, name := range want {
		if slices.Contains(served, name) {
			continue
		}
		if err := serveDHCP(ctx, host, a, name); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, name)
	}
	for _, name := range served {
		if !prune || slices.Contains(want, name) {
			continue
		}
		if err := host.StopDHCP(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("stop dhcp of %s: %w", name, err))
			continue
		}
		out = slices.DeleteFunc(out, func(s string) bool { return s == name })
	}
	return launcherDHCP{supported: true, served: out}, errors.Join(errs...)
}

// serveDHCP binds interface name's DHCP sockets and hands them to the launcher.
func serveDHCP(ctx context.Context, host DHCPHost, a *vmiAttachment, name string) error {
	socks, plan, err := a.ListenDHCP(name)
	if err != nil {
		return err
	}
	defer socks.Close()
	if err := host.ServeDHCP(ctx, plan, socks); err != nil {
		return fmt.Errorf("serve dhcp of %s: %w", name, err)
	}
	return nil
}

// networkFailed reports a network that could not be wired. Before the domain exists, a node
// without a pod network fails the VMI; other errors (kernel state) are retried.
func (r *VMIReconciler) networkFailed(vmi *vmletv1.VirtualMachineInstance, dom DomainState, err error) error {
	if errors.Is(err, errNoPodNetwork) && dom.State == DomainNone {
		r.fail(vmi, vmistatus.ReasonNoPodNetwork, err.Error()+" (autoattachPodInterface: false runs a VMI without interfaces)")
		return nil
	}
	if dom.State != DomainNone {
		r.observeDomain(vmi, dom)
	} else {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
	}
	vmistatus.NotSynchronized(vmi, vmistatus.ReasonNetworkFailed, err.Error())
	return fmt.Errorf("wire network: %w", err)
}

// cleanupNetwork removes the VMI's network from the node (teardown).
func (r *VMIReconciler) cleanupNetwork(vmi *vmletv1.VirtualMachineInstance) error {
	if r.Network == nil || r.Network.Pods == nil {
		return nil
	}
	return r.Network.release(vmi.UID)
}
