package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vmlet/vmlet/controllers/migration"
)

// Node labels and annotations the heartbeat maintains.
const (
	LabelSchedulable = "vmlet.dev/schedulable"
	LabelKVM         = "vmlet.dev/kvm"
	LabelEmulation   = "vmlet.dev/emulation"
	LabelTun         = "vmlet.dev/tun"
	AnnotHeartbeat   = "vmlet.dev/heartbeat"
	AnnotQEMUVersion = "vmlet.dev/qemu-version"
	AnnotCPUModel    = "vmlet.dev/cpu-model"
	AnnotAccelReason = "vmlet.dev/accel-reason"
	// AnnotMetricsAddress is where the node's agent serves Prometheus metrics, host:port of
	// http://host:port/metrics (absent: metrics off). vmctl top finds the agents by it.
	AnnotMetricsAddress = "vmlet.dev/metrics-address"
	DefaultHeartbeat    = 30 * time.Second
	heartbeatTimeFmt    = time.RFC3339
	heartbeatStaleMul   = 3
)

// NodeFacts are the node capabilities the heartbeat publishes (from devices.Probe and QEMU).
type NodeFacts struct {
	KVM         bool
	AccelReason string
	Tun         bool
	QEMUVersion string
	CPUModel    string
	// Postcopy: the node's launchers may receive post-copy migrations (userfaultfd).
	Postcopy bool
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
	// MetricsAddress is published as AnnotMetricsAddress ("" removes it).
	MetricsAddress string
	// OwnsReady makes the heartbeat the writer of the Node's Ready condition, as a kubelet is
	// (reason VmletReady, lastHeartbeatTime on every beat): local mode, where vmlet is the
	// node's only agent. Off (cluster mode), the Node's conditions are the kubelet's and the
	// heartbeat never writes them.
	OwnsReady bool
}

// Start implements manager.Runnable: beat now, then every Interval until ctx ends.
func (h *Heartbeat) Start(ctx context.Context) error {
	iv := h.Interval
	if iv == 0 {
		iv = DefaultHeartbeat
	}
	t := time.NewTicker(iv)
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
	node.Annotations[AnnotQEMUVersion] = h.Facts.QEMUVersion
	node.Annotations[AnnotCPUModel] = h.Facts.CPUModel
	node.Annotations[AnnotAccelReason] = h.Facts.AccelReason
	if h.MetricsAddress != "" {
		node.Annotations[AnnotMetricsAddress] = h.MetricsAddress
	} else {
		delete(node.Annotations, AnnotMetricsAddress)
	}
}

// HeartbeatStale reports whether a node's vmlet heartbeat is older than three intervals (or
// missing): its agent is gone or cut off, and its VMIs' status cannot be trusted.
func HeartbeatStale(node *corev1.Node, interval time.Duration, now time.Time) bool {
	ts, err := time.Parse(heartbeatTimeFmt, node.Annotations[AnnotHeartbeat])
	if err != nil {
		return true
	}
	return now.Sub(ts) > heartbeatStaleMul*interval
}
