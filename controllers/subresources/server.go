package subresources

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Config configures the server.
type Config struct {
	// Listener is where it serves HTTPS (the APIService's Service points here).
	Listener net.Listener
	// ServingCertPEM and ServingKeyPEM: its certificate, for DNS <service>.<namespace>.svc
	// (what kube-apiserver checks), signed by the CA in the APIService's caBundle.
	ServingCertPEM, ServingKeyPEM []byte
	// Kubeconfig is the file the delegated authentication and authorization use (TokenReview,
	// SubjectAccessReview, the configmap kube-system/extension-apiserver-authentication);
	// "" means in-cluster.
	Kubeconfig string
	// Client reads VMIs, Nodes, Namespaces and vmlet-config and patches spec.paused.
	Client client.Client
	// NodeTLS is the client side of the node agents' mTLS (vmistream.ServerTLS): the CA and a
	// certificate named vmistream.ClientName.
	NodeTLS NodeTLS
	// Recorder records pause/unpause on the VMI.
	Recorder events.EventRecorder
	Log      logr.Logger
}

// NodeTLS is the node agents' CA and this server's client certificate for them.
type NodeTLS struct{ CAPEM, CertPEM, KeyPEM []byte }

// Server is the aggregated API server.
type Server struct {
	cfg   Config
	gs    *genericapiserver.GenericAPIServer
	authz authorizer.Authorizer
	tls   *tls.Config // to the node agents
	mu    sync.Mutex
	nodes map[string]*nodeProxy // by node name
}

// New builds the server (delegated authentication and authorization; nothing is served until
// Run).
func New(cfg Config) (*Server, error) {
	scheme := k8sruntime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme)
	gc := genericapiserver.NewConfig(codecs)
	gc.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	gc.SkipOpenAPIInstallation = true
	gc.LongRunningFunc = func(r *http.Request, ri *apirequest.RequestInfo) bool {
		return ri != nil && ri.IsResourceRequest && ri.APIGroup == Group && streaming(ri.Subresource) &&
			(ri.Subresource != "qmp" || r.Method != http.MethodPost) // one qmp command is not
	}
	serving := options.NewSecureServingOptions()
	serving.Listener = cfg.Listener
	cert, err := dynamiccertificates.NewStaticCertKeyContent("serving-cert", cfg.ServingCertPEM, cfg.ServingKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	serving.ServerCert.GeneratedCert = cert
	if err := serving.ApplyTo(&gc.SecureServing); err != nil {
		return nil, fmt.Errorf("secure serving: %w", err)
	}
	authn := options.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = cfg.Kubeconfig
	if err := authn.ApplyTo(&gc.Authentication, gc.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	authz := options.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = cfg.Kubeconfig
	// Discovery is public within the cluster: kube-apiserver's aggregator checks the
	// APIService's availability on it.
	authz.AlwaysAllowPaths = append(authz.AlwaysAllowPaths, "/apis", prefix)
	if err := authz.ApplyTo(&gc.Authorization); err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	gc.LoopbackClientConfig = &rest.Config{} // no loopback: nothing here calls itself
	gs, err := gc.Complete(nil).New("vmlet-subresources", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("new aggregated server: %w", err)
	}
	s := &Server{cfg: cfg, gs: gs, authz: gc.Authorization.Authorizer, nodes: map[string]*nodeProxy{}}
	if s.tls, err = cfg.NodeTLS.config(); err != nil {
		return nil, err
	}
	gs.DiscoveryGroupManager.AddGroup(metav1.APIGroup{
		Name:             Group,
		Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: Group + "/" + Version, Version: Version}},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version},
	})
	gs.Handler.NonGoRestfulMux.Handle(prefix, http.HandlerFunc(discovery))
	gs.Handler.NonGoRestfulMux.HandlePrefix(prefix+"/", http.HandlerFunc(s.serveSub))
	return s, nil
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if err := s.gs.PrepareRun().RunWithContext(ctx); err != nil {
		return fmt.Errorf("run aggregated server: %w", err)
	}
	return nil
}

// Start implements manager.Runnable.
func (s *Server) Start(ctx context.Context) error { return s.Run(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }
