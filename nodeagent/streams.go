package nodeagent

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistream"
)

func (s *StreamsConfig) address() string {
	switch {
	case s == nil:
		return ""
	case s.Address != "":
		return s.Address
	}
	return s.Listener.Addr().String()
}

// addStreams adds the VMI stream server to mgr (cfg.Streams set): it serves while the manager
// runs, on every replica (it is not leader work).
func addStreams(mgr ctrl.Manager, cfg Config, nn *controllers.NodeNetwork) error {
	if cfg.Streams == nil {
		return nil
	}
	sc := vmistream.Config{
		Client: mgr.GetClient(), NodeName: cfg.NodeName, RunDir: cfg.Runtime.Dir,
		Recorder: mgr.GetEventRecorder("vmlet-agent"), Log: cfg.Log.WithName("streams"),
	}
	if nn != nil {
		sc.Guest = func(uid types.UID) (string, netip.Addr, error) { return nn.GuestEndpoint(uid) }
	}
	srv := vmistream.New(sc)
	ln, tc := cfg.Streams.Listener, cfg.Streams.TLS
	r := manager.RunnableFunc(func(ctx context.Context) error { return srv.Serve(ctx, ln, tc) })
	if err := mgr.Add(streamsRunnable{r}); err != nil {
		return fmt.Errorf("add vmi stream server: %w", err)
	}
	return nil
}

// streamsRunnable runs without leader election.
type streamsRunnable struct{ manager.RunnableFunc }

func (streamsRunnable) NeedLeaderElection() bool { return false }
