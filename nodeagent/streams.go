package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/subresources"
	"github.com/vmlet/vmlet/controllers/vmistream"
	"github.com/vmlet/vmlet/pki"
)

// DefaultStreamsPort is `vmlet agent`'s VMI stream port.
const DefaultStreamsPort = 8186

func (s *StreamsConfig) address() string {
	switch {
	case s == nil:
		return ""
	case s.Address != "":
		return s.Address
	}
	return s.Listener.Addr().String()
}

func (s *StreamsConfig) pin() string {
	if s == nil {
		return ""
	}
	return s.CertSHA256
}

// ClusterStreams is a cluster node's stream server config on ln: a key and self-signed
// certificate made here (the key never leaves the agent; the aggregated server pins the
// certificate by its published SHA-256), accepting only clients signed by the subresources CA
// the controller publishes (subresources.ReadClusterCA) and named vmistream.ClientName.
func ClusterStreams(ctx context.Context, c client.Reader, node string, ln net.Listener, advertise string) (*StreamsConfig, error) {
	caPEM, err := subresources.ReadClusterCA(ctx, c)
	if err != nil {
		return nil, err
	}
	self, err := pki.NewCA(pki.CAOptions{CommonName: node + " streams"})
	if err != nil {
		return nil, err
	}
	cert, err := self.Issue(pki.Node{Name: node}, pki.IssueOptions{})
	if err != nil {
		return nil, err
	}
	tc, err := vmistream.ServerTLS(caPEM, cert.CertPEM, cert.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &StreamsConfig{Listener: ln, TLS: tc, Address: advertise, CertSHA256: subresources.CertSHA256(cert.Cert)}, nil
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

// streamsRunnable runs without leader election (the stream server, the bridge watch).
type streamsRunnable struct{ manager.RunnableFunc }

func (streamsRunnable) NeedLeaderElection() bool { return false }
