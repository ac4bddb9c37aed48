package vmimetrics

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Buckets of vmlet's histograms (seconds).
var (
	rpcBuckets   = prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5 ms … 16 s
	startBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	pullBuckets  = []float64{0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// The vectors observed where things happen, registered on controller-runtime's registry (the
// one its metrics server serves) when the package loads.
var (
	scrapeErrors          = counterVec(ScrapeErrors)
	launcherRPC           = histogramVec(LauncherRPC, rpcBuckets)
	reconciles            = counterVec(Reconciles)
	imagePulls            = counterVec(ImagePulls)
	imagePullDuration     = histogramVec(ImagePullDuration, pullBuckets)
	launcherStarts        = counterVec(LauncherStarts)
	launcherStartDuration = histogramVec(LauncherStartDuration, startBuckets)
	phaseTransition       = histogramVec(PhaseTransition, kubevirtPhaseBuckets)
)

func init() {
	ctrlmetrics.Registry.MustRegister(scrapeErrors, launcherRPC, reconciles, imagePulls, imagePullDuration,
		launcherStarts, launcherStartDuration, phaseTransition)
}

func counterVec(f *Family) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: f.Help}, f.Labels)
}

func histogramVec(f *Family, b []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.Name, Help: f.Help, Buckets: b}, f.Labels)
}

func result(err error) string {
	if err != nil {
		return "failure"
	}
	return "success"
}

// LauncherRPCInterceptor times the agent's unary calls to a launcher
// (vmlet_launcher_rpc_duration_seconds{method, code}); give it to the launcher's dial.
func LauncherRPCInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	t0 := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	launcherRPC.WithLabelValues(path.Base(method), status.Code(err).String()).Observe(time.Since(t0).Seconds())
	return err
}

// ObserveImagePull counts one image pull (a cache hit included) and its duration.
func ObserveImagePull(d time.Duration, err error) {
	r := result(err)
	imagePulls.WithLabelValues(r).Inc()
	imagePullDuration.WithLabelValues(r).Observe(d.Seconds())
}

// ObserveLauncherStart counts one launcher start (its process or pod created) and its duration.
func ObserveLauncherStart(d time.Duration, err error) {
	r := result(err)
	launcherStarts.WithLabelValues(r).Inc()
	launcherStartDuration.WithLabelValues(r).Observe(d.Seconds())
}

// Reconcile results.
const (
	ResultOK       = "ok"
	ResultRequeue  = "requeue"
	ResultConflict = "conflict"
	ResultError    = "error"
)

// ObserveReconcile counts one VMI reconcile by result and by the reason of the VMI's Ready
// condition after the pass (a bounded set: vmlet's condition reasons; "" for a VMI that is
// gone or has none).
func ObserveReconcile(result string, vmi *vmletv1.VirtualMachineInstance) {
	reason := ""
	if vmi != nil {
		if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceReady); c != nil {
			reason = c.Reason
		}
	}
	reconciles.WithLabelValues(result, reason).Inc()
}

// ObservePhaseTransition observes kubevirt_vmi_phase_transition_time_seconds for a status
// write that moved the VMI from phase old to its current one: the time between the two phases'
// transition timestamps (from the VMI's creation when old is unset), as virt-controller does.
func ObservePhaseTransition(old vmletv1.VirtualMachineInstancePhase, vmi *vmletv1.VirtualMachineInstance) {
	if secs, ok := PhaseTransitionSeconds(old, vmi); ok {
		phaseTransition.WithLabelValues(string(vmi.Status.Phase), string(old)).Observe(secs)
	}
}

// PhaseTransitionSeconds is the duration a phase change from old to the VMI's phase took; false
// when there was no change or a timestamp is missing.
func PhaseTransitionSeconds(old vmletv1.VirtualMachineInstancePhase, vmi *vmletv1.VirtualMachineInstance) (float64, bool) {
	now := vmi.Status.Phase
	if old == now {
		return 0, false
	}
	var from, to time.Time
	if old == "" {
		from = vmi.CreationTimestamp.Time
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		switch t.Phase {
		case now:
			to = t.PhaseTransitionTimestamp.Time // the latest entry wins
		case old:
			from = t.PhaseTransitionTimestamp.Time
		}
	}
	if from.IsZero() || to.IsZero() || to.Before(from) {
		return 0, false
	}
	return to.Sub(from).Seconds(), true
}
