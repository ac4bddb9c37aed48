package subresources

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistream"
)

// config is the client TLS to the node agents (server names set per node).
func (t NodeTLS) config() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(t.CertPEM, t.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("node client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(t.CAPEM) {
		return nil, errors.New("node client tls: no ca certificate")
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// nodeProxy forwards to one node agent's stream server.
type nodeProxy struct {
	addr string
	pin  string // AnnotStreamsCertSHA256, "" for CA-signed
	rp   *httputil.ReverseProxy
}

// nodeProxy returns the proxy to the node's agent (the node's certificate must name the node).
func (s *Server) nodeProxy(r *http.Request, node string) (*nodeProxy, error) {
	addr, pin, err := s.nodeAddress(r, node)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.nodes[node]; p != nil && p.addr == addr && p.pin == pin {
		return p, nil
	}
	tc := s.tls.Clone()
	tc.ServerName = node
	if pin != "" {
		// A self-signed node certificate (cluster mode): exactly the one the node published.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || CertSHA256(cs.PeerCertificates[0]) != pin {
				return fmt.Errorf("node %s stream certificate does not match its %s", node, controllers.AnnotStreamsCertSHA256)
			}
			return nil
		}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: false}
	p := &nodeProxy{addr: addr, pin: pin, rp: &httputil.ReverseProxy{
		Transport:     tr,
		Rewrite:       func(*httputil.ProxyRequest) {}, // serve rewrote the request already
		FlushInterval: -1,                              // qmplog follows: every write goes out at once
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			vmistream.WriteStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("node %s agent at %s: %v", node, addr, err)))
		},
	}}
	s.nodes[node] = p
	return p, nil
}

// serve forwards the request to the agent at /v1/<rest>, as caller with the QMP allow-list.
// What kube-apiserver's front proxy and the client sent to identify themselves does not go on.
func (p *nodeProxy) serve(w http.ResponseWriter, r *http.Request, rest, caller, allow string) {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.URL.Path, out.URL.RawPath = "https", p.addr, "/v1/"+rest, ""
	out.Host = p.addr
	for k := range out.Header {
		lk := strings.ToLower(k)
		if lk == "authorization" || strings.HasPrefix(lk, "x-remote-") || strings.HasPrefix(lk, "impersonate-") || strings.HasPrefix(lk, "x-vmlet-") {
			out.Header.Del(k)
		}
	}
	out.Header.Set(vmistream.HeaderCaller, caller)
	if allow != "" {
		out.Header.Set(vmistream.HeaderQMPAllow, allow)
	}
	p.rp.ServeHTTP(w, out)
}
