package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/test/prereq"
)

func beatNode(stamp, interval string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}}}
	if stamp != "" {
		n.Annotations[controllers.AnnotHeartbeat] = stamp
	}
	if interval != "" {
		n.Annotations[controllers.AnnotHeartbeatInterval] = interval
	}
	return n
}

// TestHeartbeatStale: a node is stale once its last beat is more than three of the intervals
// it publishes old (the fallback when it publishes none); sub-second stamps and the whole-second
// ones of older agents both parse; no stamp is "never beat" (stale, no deadline).
func TestHeartbeatStale(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 500_000_000, time.UTC)
	for _, tt := range []struct {
		name, stamp, interval string
		fallback              time.Duration
		wantDeadline          time.Time
		wantOK                bool
	}{
		{"published interval", at.Format(time.RFC3339Nano), "1s", time.Hour, at.Add(3 * time.Second), true},
		{"fallback", at.Format(time.RFC3339Nano), "", 30 * time.Second, at.Add(90 * time.Second), true},
		{"bad interval falls back", at.Format(time.RFC3339Nano), "soon", 10 * time.Second, at.Add(30 * time.Second), true},
		{"whole seconds", "2026-12-01T10:00:00Z", "2s", time.Hour, at.Truncate(time.Second).Add(6 * time.Second), true},
		{"never beat", "", "1s", time.Second, time.Time{}, false},
		{"garbage", "yesterday", "1s", time.Second, time.Time{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := beatNode(tt.stamp, tt.interval)
			d, ok := controllers.HeartbeatDeadline(n, tt.fallback)
			if ok != tt.wantOK || !d.Equal(tt.wantDeadline) {
				t.Fatalf("HeartbeatDeadline = %v, %v; want %v, %v", d, ok, tt.wantDeadline, tt.wantOK)
			}
			if !ok {
				if !controllers.HeartbeatStale(n, tt.fallback, at) {
					t.Error("a node without a heartbeat is not stale")
				}
				return
			}
			if controllers.HeartbeatStale(n, tt.fallback, d) {
				t.Error("stale at its deadline (want: only once older than three intervals)")
			}
			if !controllers.HeartbeatStale(n, tt.fallback, d.Add(time.Millisecond)) {
				t.Error("not stale just past its deadline")
			}
		})
	}
}

// TestMetricsHostPort: a metrics bind address with a host is published as is; a wildcard one
// as the Node's InternalIP, else its Hostname address, else its name, with the bound port.
func TestMetricsHostPort(t *testing.T) {
	addrs := func(a ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: a}}
	}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}
	host := corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-a.example"}
	v6 := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::7"}
	for _, tt := range []struct {
		bind string
		node *corev1.Node
		want string
	}{
		{"127.0.0.1:9250", addrs(internal), "127.0.0.1:9250"},
		{":9250", addrs(host, internal), "10.1.2.3:9250"},
		{"0.0.0.0:9250", addrs(internal, host), "10.1.2.3:9250"},
		{"[::]:9250", addrs(v6), "[fd00::7]:9250"},
		{":9250", addrs(host), "node-a.example:9250"},
		{":41234", addrs(), "node-a:41234"},
		{"", addrs(internal), ""},
	} {
		if got := controllers.MetricsHostPort(tt.bind, tt.node); got != tt.want {
			t.Errorf("MetricsHostPort(%q, %v) = %q, want %q", tt.bind, tt.node.Status.Addresses, got, tt.want)
		}
	}
}

// TestHeartbeatPublishesFacts: the heartbeat writes the node's facts (QEMU version, CPU model,
// the CPU model VMIs get by default, accelerator), its interval and the metrics address, a
// wildcard one resolved to the Node's InternalIP; facts it does not know are absent, not "".
func TestHeartbeatPublishesFacts(t *testing.T) {
	prereq.APIServer(t)
	ctx := context.Background()
	name := "hb-facts-" + time.Now().Format("150405.000000")
	t.Cleanup(func() { _ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	hb := &controllers.Heartbeat{Client: env.Client, NodeName: name, Interval: 7 * time.Second, MetricsAddress: ":9250",
		Facts: controllers.NodeFacts{QEMUVersion: "7.2.22 (Debian)", CPUModel: "AMD EPYC", AccelReason: "no vmx/svm"}}
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		controllers.AnnotQEMUVersion: "7.2.22 (Debian)", controllers.AnnotCPUModel: "AMD EPYC",
		controllers.AnnotDefaultCPUModel: "max", controllers.AnnotAccelReason: "no vmx/svm",
		controllers.AnnotHeartbeatInterval: "7s", controllers.AnnotMetricsAddress: "192.0.2.10:9250",
	}
	for k, v := range want {
		if got.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, got.Annotations[k], v)
		}
	}
	if got.Labels[controllers.LabelEmulation] != "tcg" || got.Labels[controllers.LabelSchedulable] != "true" {
		t.Errorf("labels %v", got.Labels)
	}
	hb.Facts.QEMUVersion, hb.MetricsAddress = "", ""
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{controllers.AnnotQEMUVersion, controllers.AnnotMetricsAddress} {
		if v, ok := got.Annotations[k]; ok {
			t.Errorf("unknown %s published as %q, want it absent", k, v)
		}
	}
}
