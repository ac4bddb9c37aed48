package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/selinuxlabel"
)

// Node labels and annotations the heartbeat maintains.
const (
	LabelSchedulable = "vmlet.dev/schedulable"
	LabelKVM         = "vmlet.dev/kvm"
	LabelEmulation   = "vmlet.dev/emulation"
	LabelTun         = "vmlet.dev/tun"
	// LabelSELinux is the node's SELinux mode: disabled, permissive or enforcing.
	LabelSELinux = "vmlet.dev/selinux"
	// AnnotSELinuxPolicy is the loaded SELinux policy type (e.g. targeted); absent when
	// SELinux is disabled.
	AnnotSELinuxPolicy = "vmlet.dev/selinux-policy"
	AnnotHeartbeat     = "vmlet.dev/heartbeat"
	AnnotQEMUVersion   = "vmlet.dev/qemu-version"
	AnnotCPUModel      = "vmlet.dev/cpu-model"
	AnnotAccelReason   = "vmlet.dev/accel-reason"
	// AnnotDefaultCPUModel is the CPU model QEMU offers a VMI that names none here: "host"
	// with KVM, "max" under TCG (a migratable VMI gets qemu.DefaultMigratableCPU anywhere).
	AnnotDefaultCPUModel = "vmlet.dev/default-cpu-model"
	// AnnotHeartbeatInterval is the agent's heartbeat interval (a Go duration): the cluster
	// controller marks the node unschedulable when no beat came for three of them.
	AnnotHeartbeatInterval = "vmlet.dev/heartbeat-interval"
	// AnnotMetricsAddress is where the node's agent serves Prometheus metrics, host:port of
	// http://host:port/metrics (absent: metrics off). vmctl top finds the agents by it.
	AnnotMetricsAddress = "vmlet.dev/metrics-address"
	// AnnotStreamsAddress is where the node's agent serves the VMI streams of the
	// subresources API (package vmistream, mTLS), host:port; absent: it serves none.
	AnnotStreamsAddress = "vmlet.dev/streams-address"
	// AnnotStreamsCertSHA256 is the hex SHA-256 of the stream server's self-signed
	// certificate (cluster mode), which the aggregated server pins; absent: the certificate
	// is signed by the subresources CA (local mode).
	AnnotStreamsCertSHA256 = "vmlet.dev/streams-cert-sha256"
	DefaultHeartbeat       = 30 * time.Second
	// heartbeatTimeFmt keeps sub-second precision (short test intervals); time.RFC3339
	// parses it, and the seconds-only stamps of older agents.
	heartbeatTimeFmt  = time.RFC3339Nano
	heartbeatStaleMul = 3
)

// NodeFacts are the node capabilities the heartbeat publishes (from devices.Probe and QEMU).
type NodeFacts struct {
	KVM         bool
	AccelReason string
	Tun         bool
	// QEMUVersion is `qemu-system-x86_64 --version`'s (e.g. "7.2.19 (Debian
	// 1:7.2+dfsg-7+deb12u18)"); empty where the node has no QEMU of its own (cluster mode:
	// QEMU is in the launcher image, and each VMI's status says the version it runs).
	QEMUVersion string
	// CPUModel is the host CPU's model name (/proc/cpuinfo "model name").
	CPUModel string
	// Postcopy: the node's launchers may receive post-copy migrations (userfaultfd).
	Postcopy bool
	// SELinux is the node's SELinux (selinuxlabel.Probe).
	SELinux selinuxlabel.State
}

// SELinuxMode is the LabelSELinux value: the probe's mode, disabled when unknown.
func (f NodeFacts) SELinuxMode() string {
	if f.SELinux.Mode == "" {
		return selinuxlabel.ModeDisabled
	}
	return f.SELinux.Mode
}

// DefaultCPUModel is the CPU model a VMI with no cpu.model gets on this node (qemu's
// resolution: host with KVM, max under TCG).
func (f NodeFacts) DefaultCPUModel() string {
	if f.KVM {
		return "host"
	}
	return "max"
}

// Labels are the node labels for these facts.
func (f NodeFacts) Labels() map[string]string {
	emu := "tcg"
	if f.KVM {
		emu = "kvm"
	}
	return map[string]string{
		LabelSchedulable:        "true",
		LabelKVM:                strconv.FormatBool(f.KVM),
		LabelEmulation:          emu,
		LabelTun:                strconv.FormatBool(f.Tun),
		migration.LabelPostcopy: strconv.FormatBool(f.Postcopy),
		LabelSELinux:            f.SELinuxMode(),
	}
}

// RegisteredLabels are the labels of a Node that vmlet registers itself (local mode, no
// kubelet): the facts' labels and, as a kubelet sets it, kubernetes.io/hostname=name, which
// VMIs are pinned to a node with (nodeSelector).
func RegisteredLabels(name string, f NodeFacts) map[string]string {
	l := f.Labels()
	l[corev1.LabelHostname] = name
	return l
}

// Heartbeat keeps the Node's vmlet labels and heartbeat annotation fresh. With Register it
// creates the Node when missing (local mode has no kubelet to do it).
type Heartbeat struct {
	Client   client.Client
	NodeName string
	Facts    NodeFacts
	Interval time.Duration
	Register bool
	// MetricsAddress is published as AnnotMetricsAddress ("" removes it). A wildcard host
	// (":9250", "0.0.0.0:9250", "[::]:9250") is published as the Node's InternalIP (else its
	// Hostname address, else its name) with that port: MetricsHostPort.
	MetricsAddress string
	// StreamsAddress is published as AnnotStreamsAddress ("" removes it), a wildcard host as
	// MetricsAddress's.
	StreamsAddress string
	// StreamsCertSHA256 is published as AnnotStreamsCertSHA256 ("" removes it).
	StreamsCertSHA256 string
	// OwnsReady makes the heartbeat the writer of the Node's Ready condition, as a kubelet is
	// (reason VmletReady, lastHeartbeatTime on every beat): local mode, where vmlet is the
	// node's only agent. Off (cluster mode), the Node's conditions are the kubelet's and the
	// heartbeat never writes them.
	OwnsReady bool
}

// Start implements manager.Runnable: beat now, then every Interval until ctx ends.
func (h *Heartbeat) Start(ctx context.Context) error {
	t := time.NewTicker(h.interval())
	defer t.Stop()
	for {
		if err := h.Beat(ctx); err != nil {
			log.FromContext(ctx).Error(err, "heartbeat failed", "node", h.NodeName)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Beat writes one heartbeat.
func (h *Heartbeat) Beat(ctx context.Context) error {
	node := &corev1.Node{}
	err := h.Client.Get(ctx, client.ObjectKey{Name: h.NodeName}, node)
	if apierrors.IsNotFound(err) && h.Register {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.NodeName}}
		h.apply(node)
		if err := h.Client.Create(ctx, node); err != nil {
			return fmt.Errorf("register node: %w", err)
		}
		return h.ready(ctx, node)
	}
	if err != nil {
		return fmt.Errorf("get node: %w", err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	h.apply(node)
	if err := h.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("patch node: %w", err)
	}
	return h.ready(ctx, node)
}

func (h *Heartbeat) ready(ctx context.Context, node *corev1.Node) error {
	if !h.OwnsReady {
		return nil
	}
	return h.setReady(ctx, node, corev1.ConditionTrue, ReasonVmletReady, "vmlet is posting ready status")
}

func (h *Heartbeat) apply(node *corev1.Node) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range h.Facts.Labels() {
		node.Labels[k] = v
	}
	if h.Register {
		node.Labels[corev1.LabelHostname] = h.NodeName
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[AnnotHeartbeat] = time.Now().UTC().Format(heartbeatTimeFmt)
	node.Annotations[AnnotHeartbeatInterval] = h.interval().String()
	for k, v := range map[string]string{
		AnnotQEMUVersion:       h.Facts.QEMUVersion,
		AnnotCPUModel:          h.Facts.CPUModel,
		AnnotDefaultCPUModel:   h.Facts.DefaultCPUModel(),
		AnnotAccelReason:       h.Facts.AccelReason,
		AnnotSELinuxPolicy:     h.Facts.SELinux.PolicyType,
		AnnotMetricsAddress:    MetricsHostPort(h.MetricsAddress, node),
		AnnotStreamsAddress:    MetricsHostPort(h.StreamsAddress, node),
		AnnotStreamsCertSHA256: h.StreamsCertSHA256,
	} {
		if v != "" {
			node.Annotations[k] = v
		} else {
			delete(node.Annotations, k) // unknown is absent, not ""
		}
	}
}

func (h *Heartbeat) interval() time.Duration {
	if h.Interval <= 0 {
		return DefaultHeartbeat
	}
	return h.Interval
}

// MetricsHostPort is where others reach a metrics endpoint bound to bind on node: bind itself,
// or, for a wildcard host, the node's InternalIP (else its Hostname address, else its name)
// with bind's port. "" for "". Pure.
func MetricsHostPort(bind string, node *corev1.Node) string {
	host, port, err := net.SplitHostPort(bind)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return bind
	}
	host = node.Name
	for _, t := range []corev1.NodeAddressType{corev1.NodeHostName, corev1.NodeInternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type == t && a.Address != "" {
				host = a.Address
				break
			}
		}
	}
	return net.JoinHostPort(host, port)
}

// HeartbeatStale reports whether a node's vmlet heartbeat is older than three intervals (or
// missing): its agent is gone or cut off, and its VMIs' status cannot be trusted. interval is
// the one the node publishes (AnnotHeartbeatInterval), else fallback.
func HeartbeatStale(node *corev1.Node, fallback time.Duration, now time.Time) bool {
	d, ok := HeartbeatDeadline(node, fallback)
	return !ok || now.After(d)
}

// HeartbeatDeadline is when the node's heartbeat goes stale: its last beat plus three of the
// intervals it publishes (AnnotHeartbeatInterval; fallback when it publishes none). ok is
// false when the node has no (readable) vmlet heartbeat at all. Pure.
func HeartbeatDeadline(node *corev1.Node, fallback time.Duration) (deadline time.Time, ok bool) {
	ts, err := time.Parse(time.RFC3339, node.Annotations[AnnotHeartbeat])
	if err != nil {
		return time.Time{}, false
	}
	iv, err := time.ParseDuration(node.Annotations[AnnotHeartbeatInterval])
	if err != nil || iv <= 0 {
		iv = fallback
	}
	return ts.Add(heartbeatStaleMul * iv), true
}
