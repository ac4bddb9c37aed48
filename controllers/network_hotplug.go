package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/internal/revert"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// NICHotplugger plugs NICs into a running domain and unplugs them: the launcher's HotplugNIC
// and UnplugNIC RPCs. A Launcher without it cannot hotplug interfaces.
type NICHotplugger interface {
	// AttachedNICs lists the ids of the domain's NICs, cold- and hotplugged.
	AttachedNICs(ctx context.Context) ([]string, error)
	// HotplugNIC attaches n on its tap n.TapName in the network namespace netns.
	HotplugNIC(ctx context.Context, n qemu.NIC, netns string) error
	// UnplugNIC returns once the guest released the NIC.
	UnplugNIC(ctx context.Context, id string) error
}

var _ NICHotplugger = (*grpcLauncher)(nil)

func (g *grpcLauncher) AttachedNICs(ctx context.Context) ([]string, error) {
	ctx, cancel := bound(ctx, callAttachedNICs)
	defer cancel()
	d, err := g.c.GetDomain(ctx)
	if err != nil {
		return nil, err
	}
	return d.GetNics(), nil
}

func (g *grpcLauncher) HotplugNIC(ctx context.Context, n qemu.NIC, netns string) error {
	ctx, cancel := bound(ctx, callHotplugNIC)
	defer cancel()
	if err := g.handOverTap(ctx, n, netns); err != nil {
		return fmt.Errorf("hotplug nic %s: %w", n.ID, err)
	}
	return g.c.HotplugNIC(ctx, launcher.NICToProto(n, netns))
}

func (g *grpcLauncher) UnplugNIC(ctx context.Context, id string) error {
	ctx, cancel := bound(ctx, callUnplugNIC)
	defer cancel()
	return g.c.UnplugNIC(ctx, id)
}

// errUnknownSecondary: a multus network that the node does not offer.
var errUnknownSecondary = errors.New("secondary network not offered by this node")

// offers reports whether the node offers multus network name (a "namespace/" prefix is
// ignored: the node's networks are not namespaced).
func (n *NodeNetwork) offers(name string) bool {
	return slices.Contains(n.secondaryNames(), shortNetwork(name))
}

// shortNetwork is a multus network name without its "namespace/" prefix.
func shortNetwork(name string) string {
	if _, short, found := strings.Cut(name, "/"); found {
		return short
	}
	return name
}

// interfacesOf is where the pod interfaces of multus network name are made: a spanning
// network's own, else the node's.
func (n *NodeNetwork) interfacesOf(name string) PodInterfaces {
	if sp, ok := n.Spanning[shortNetwork(name)]; ok {
		return sp
	}
	return n.Pods
}

// everyInterfaces are the node's PodInterfaces: its own and each spanning network's.
func (n *NodeNetwork) everyInterfaces() []PodInterfaces {
	out := []PodInterfaces{n.Pods}
	for _, name := range slices.Sorted(maps.Keys(n.Spanning)) {
		out = append(out, n.Spanning[name])
	}
	return out
}

// SpanningNetworks are the names of the multus networks that span the nodes, sorted.
func (n *NodeNetwork) SpanningNetworks() []string {
	if n == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(n.Spanning))
}

// removeInterfaces removes every interface of pod id that pi holds (what names pi in errors).
func removeInterfaces(pi PodInterfaces, id, what string) error {
	names, err := pi.Interfaces(id)
	if err != nil {
		return fmt.Errorf("list %s interfaces: %w", what, err)
	}
	var errs []error
	for _, ifname := range names {
		errs = append(errs, pi.RemoveInterface(id, ifname))
	}
	return errors.Join(errs...)
}

// plugSecondary wires interface hot of spec in the VMI's pod: its pod interface (Multus's job,
// done by PodNetworks in local mode) and its bridge binding with DHCP. It returns the NIC to
// plug, resolved from the binding plan, and the netns of its tap. Idempotent; on failure what
// this call created is removed again.
func (n *NodeNetwork) plugSecondary(uid types.UID, spec *network.Spec, hot translate.HotNIC) (_ qemu.NIC, _ string, err error) {
	a := n.attachment(uid)
	if a == nil {
		return qemu.NIC{}, "", fmt.Errorf("plug interface %s: the VMI's network is not attached", hot.Name)
	}
	if ip, ok := findPlan(a.Plan(), hot.Name); ok {
		return resolveNIC(hot.NIC, ip), a.netns, nil
	}
	att := ""
	for _, nw := range spec.Networks {
		if nw.Name == hot.Name {
			att = nw.Attachment
		}
	}
	if !n.offers(att) {
		return qemu.NIC{}, "", fmt.Errorf("plug interface %s: %w: multus network %q (this node offers %v)", hot.Name, errUnknownSecondary, att, n.secondaryNames())
	}
	pods := n.interfacesOf(att)
	had, err := pods.Interfaces(string(uid))
	if err != nil {
		return qemu.NIC{}, "", fmt.Errorf("plug interface %s: %w", hot.Name, err)
	}
	if _, err := pods.AddInterface(string(uid), hot.PodInterface); err != nil {
		return qemu.NIC{}, "", fmt.Errorf("plug interface %s: %w", hot.Name, err)
	}
	undo := revert.New()
	defer undo.FailErr(&err)
	if !slices.Contains(had, hot.PodInterface) {
		undo.AddErr(func() error { return pods.RemoveInterface(string(uid), hot.PodInterface) })
	}
	s := *spec
	s.ResolvConf = n.ResolvConf
	ip, err := a.AddInterface(&s, hot.Name)
	if err != nil {
		return qemu.NIC{}, "", fmt.Errorf("plug interface %s: %w", hot.Name, err)
	}
	undo.Success()
	return resolveNIC(hot.NIC, ip), a.netns, nil
}

func (n *NodeNetwork) secondaryNames() []string {
	nets := n.Secondary
	if nets == nil {
		nets = DefaultSecondaryNetworks
	}
	return append(slices.Clone(nets), n.SpanningNetworks()...)
}

// unplugSecondary removes interface name's binding and pod interface podIf (idempotent).
func (n *NodeNetwork) unplugSecondary(uid types.UID, name, podIf string) error {
	var errs []error
	if a := n.attachment(uid); a != nil {
		errs = append(errs, a.RemoveInterface(name))
	}
	for _, pods := range n.everyInterfaces() { // wherever it is: RemoveInterface is idempotent
		errs = append(errs, pods.RemoveInterface(string(uid), podIf))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unplug interface %s: %w", name, err)
	}
	return nil
}

// pruneSecondaries removes the bindings and pod interfaces of secondary interfaces that are
// neither wanted (keep) nor the boot interfaces, except those whose NIC the domain still has
// (busy: its unplug failed and is retried).
func (n *NodeNetwork) pruneSecondaries(uid types.UID, boot []string, keep []translate.HotNIC, busy []string) error {
	a := n.attachment(uid)
	if a == nil {
		return nil
	}
	names, err := a.Interfaces()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if slices.Contains(boot, name) || slices.Contains(busy, name) || slices.ContainsFunc(keep, func(h translate.HotNIC) bool { return h.Name == name }) {
			continue
		}
		errs = append(errs, a.RemoveInterface(name))
	}
	for _, pods := range n.everyInterfaces() {
		podIfs, err := pods.Interfaces(string(uid))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, podIf := range podIfs {
			if slices.ContainsFunc(keep, func(h translate.HotNIC) bool { return h.PodInterface == podIf }) ||
				slices.ContainsFunc(busy, func(name string) bool { return network.SecondaryInterfaceName(name) == podIf }) {
				continue
			}
			errs = append(errs, pods.RemoveInterface(string(uid), podIf))
		}
	}
	return errors.Join(errs...)
}

func findPlan(p *network.Plan, name string) (network.InterfacePlan, bool) {
	for _, ip := range p.Interfaces {
		if ip.Name == name {
			return ip, true
		}
	}
	return network.InterfacePlan{}, false
}

// resolveNIC is translate.ResolveNICs for one NIC.
func resolveNIC(n qemu.NIC, ip network.InterfacePlan) qemu.NIC {
	n.MAC, n.TapName, n.Queues = ip.MAC.String(), ip.Tap, ip.Queues
	return n
}

// reconcileNICs makes the running domain's secondary NICs match the VMI's interfaces of multus
// networks (want.HotplugNICs): it wires and plugs the missing ones, unplugs NICs whose interface is absent or
// gone, and removes their bindings and pod interfaces. An interface that cannot be plugged is
// reported (Synchronized=False with its reason, a Warning event) without disturbing the
// others; nothing of it stays half-created.
//
// synced is the Synchronized condition as the reconcile found it: a Warning event is recorded
// only when the reason changes. served are the interfaces whose DHCP the launcher serves: a
// plugged interface's service is handed over before its NIC is plugged (the guest asks at
// once), a removed one's stopped once its binding is gone.
func (r *VMIReconciler) reconcileNICs(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, want *translate.Desired, synced *metav1.Condition, served launcherDHCP) error {
	if r.Network == nil || r.Network.Pods == nil || r.Network.attachment(vmi.UID) == nil {
		return nil
	}
	hp, ok := l.(NICHotplugger)
	if !ok {
		if len(want.HotplugNICs) > 0 {
			r.nicsDegraded(vmi, synced, vmistatus.ReasonInterfaceHotplugFailed, errors.New("this node's launchers cannot hotplug interfaces"))
		}
		return nil
	}
	attached, err := hp.AttachedNICs(ctx)
	if err != nil {
		return fmt.Errorf("list nics: %w", err)
	}
	var problems []nicProblem
	plugFailed := false
	for _, hot := range want.HotplugNICs {
		nic, netns, err := r.Network.plugSecondary(vmi.UID, want.Network, hot)
		if err != nil {
			plugFailed = true
			reason := vmistatus.ReasonInterfaceHotplugFailed
			if errors.Is(err, errUnknownSecondary) || errors.Is(err, network.ErrInvalidSpec) {
				reason = vmistatus.ReasonUnknownNetwork
			}
			problems = append(problems, nicProblem{reason, err})
			continue
		}
		if slices.Contains(attached, nic.ID) {
			continue
		}
		if served, err = r.ensureDHCP(ctx, vmi, l, served, false); err != nil {
			problems = append(problems, nicProblem{vmistatus.ReasonInterfaceHotplugFailed, fmt.Errorf("hotplug interface %s: %w", hot.Name, err)})
			continue
		}
		if err := hp.HotplugNIC(ctx, nic, netns); err != nil {
			err = errors.Join(fmt.Errorf("hotplug interface %s: %w", hot.Name, err), r.Network.unplugSecondary(vmi.UID, hot.Name, hot.PodInterface))
			problems = append(problems, nicProblem{vmistatus.ReasonInterfaceHotplugFailed, err})
			continue
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonInterfaceAttached), "Hotplug", "interface %s plugged as NIC %s (MAC %s)", hot.Name, nic.ID, nic.MAC)
	}
	var busy []string
	var pending []error
	for _, id := range attached {
		if !isSecondaryNIC(id, want) {
			continue
		}
		uctx, cancel := context.WithTimeout(ctx, unplugTimeout)
		err := hp.UnplugNIC(uctx, id)
		cancel()
		name := interfaceOfNIC(vmi, id)
		if errors.Is(err, launcher.ErrUnplugPending) {
			busy = append(busy, name) // QEMU holds its tap until the guest released the NIC
			pending = append(pending, unplugPending{"nic " + id})
			continue
		}
		if err != nil {
			busy = append(busy, name)
			problems = append(problems, nicProblem{vmistatus.ReasonInterfaceUnplugFailed, fmt.Errorf("unplug nic %s: %w", id, err)})
			continue
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonInterfaceDetached), "Unplug", "NIC %s of interface %s unplugged", id, name)
	}
	// A NIC that failed to unplug keeps its binding; one whose interface left the spec cannot
	// be told apart from the others: then nothing is removed until it is unplugged.
	if !slices.Contains(busy, "") {
		if err := r.Network.pruneSecondaries(vmi.UID, want.BootInterfaces(), want.HotplugNICs, busy); err != nil {
			problems = append(problems, nicProblem{vmistatus.ReasonInterfaceUnplugFailed, fmt.Errorf("remove unplugged interfaces: %w", err)})
		}
	}
	// An interface that failed to plug may still have its binding and its guest a lease from
	// an earlier agent: its DHCP stays until it plugs or goes.
	if _, err := r.ensureDHCP(ctx, vmi, l, served, !plugFailed); err != nil {
		problems = append(problems, nicProblem{vmistatus.ReasonInterfaceUnplugFailed, fmt.Errorf("stop dhcp of unplugged interfaces: %w", err)})
	}
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p.err
		}
		err := errors.Join(errs...)
		r.nicsDegraded(vmi, synced, problems[0].reason, err)
		if problems[0].reason == vmistatus.ReasonUnknownNetwork && len(problems) == 1 {
			return errors.Join(pending...) // nothing else to retry until the spec changes
		}
		return errors.Join(append([]error{err}, pending...)...)
	}
	return errors.Join(pending...)
}

// nicsDegraded sets Synchronized=False with reason, recording a Warning event when the
// condition did not say so before this reconcile.
func (r *VMIReconciler) nicsDegraded(vmi *vmletv1.VirtualMachineInstance, synced *metav1.Condition, reason vmistatus.Reason, err error) {
	if synced == nil || synced.Reason != string(reason) || synced.Message != err.Error() {
		r.Recorder.Eventf(vmi, nil, "Warning", string(reason), "HotplugInterface", "%v", err)
	}
	vmistatus.NotSynchronized(vmi, reason, err.Error())
}

type nicProblem struct {
	reason vmistatus.Reason
	err    error
}

// deferNICs says, in a Normal HotplugDeferred event, which interfaces the spec plugs or unplugs
// that this node, a migration's source, leaves to the node the guest runs on after the
// migration: the target started with the layout the source published.
func (r *VMIReconciler) deferNICs(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, want *translate.Desired) {
	hp, ok := l.(NICHotplugger)
	if !ok || r.Network == nil || r.Network.attachment(vmi.UID) == nil {
		return
	}
	attached, err := hp.AttachedNICs(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("list nics", "err", err)
		return
	}
	plug, unplug := deferredNICs(vmi, attached, want)
	if len(plug)+len(unplug) == 0 {
		return
	}
	var what []string
	if len(plug) > 0 {
		what = append(what, "to plug "+strings.Join(plug, ", "))
	}
	if len(unplug) > 0 {
		what = append(what, "to unplug "+strings.Join(unplug, ", "))
	}
	r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonHotplugDeferred), "Hotplug",
		"interfaces %s: left to the node the guest runs on after the migration to %s (the source changes no NIC once a migration began)",
		strings.Join(what, "; "), vmi.Status.MigrationState.TargetNode)
}

// deferredNICs are the interfaces, by name, that the spec plugs (hot-plugged NICs not
// attached) and unplugs (attached NICs it no longer wants). Pure.
func deferredNICs(vmi *vmletv1.VirtualMachineInstance, attached []string, want *translate.Desired) (plug, unplug []string) {
	for _, h := range want.HotplugNICs {
		if !slices.Contains(attached, h.NIC.ID) {
			plug = append(plug, h.Name)
		}
	}
	for _, id := range attached {
		if !isSecondaryNIC(id, want) {
			continue
		}
		name := interfaceOfNIC(vmi, id)
		if name == "" {
			name = "(NIC " + id + ")"
		}
		unplug = append(unplug, name)
	}
	return plug, unplug
}

// isSecondaryNIC reports whether NIC id is not one the VMI wants: neither a boot NIC nor a
// present interface of a multus network.
func isSecondaryNIC(id string, want *translate.Desired) bool {
	if slices.ContainsFunc(want.Spec.NICs, func(n qemu.NIC) bool { return n.ID == id }) {
		return false
	}
	return !slices.ContainsFunc(want.HotplugNICs, func(h translate.HotNIC) bool { return h.NIC.ID == id })
}

// interfaceOfNIC is the name of the VMI interface whose NIC is id ("" when the spec no longer
// lists it).
func interfaceOfNIC(vmi *vmletv1.VirtualMachineInstance, id string) string {
	for _, ifc := range vmi.Spec.Domain.Devices.Interfaces {
		if translate.NICID(ifc.Name) == id {
			return ifc.Name
		}
	}
	return ""
}
