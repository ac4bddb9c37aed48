package realcluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vmlet/vmlet/controllers/subresources"
	"github.com/vmlet/vmlet/pki"
)

// kubeletClientUser is the API server's identity towards the kubelet (logs, exec, port-forward).
const kubeletClientUser = "kube-apiserver-kubelet-client"

// File names envtest's API server reads from its cert dir when they exist.
const (
	servingCert = "apiserver.crt"
	servingKey  = "apiserver.key"
	saCert      = "sa-signer.crt"
	saKey       = "sa-signer.key"
)

// Users the cluster's components authenticate as (client certificates of envtest's client CA).
var users = map[string]envtest.User{
	"admin":                   {Name: "vmlet-cluster-admin", Groups: []string{"system:masters"}},
	"kube-controller-manager": {Name: "system:kube-controller-manager"},
	"kube-scheduler":          {Name: "system:kube-scheduler"},
	"kube-proxy":              {Name: "system:kube-proxy"}, // bound to system:node-proxier by default
}

// writePKI makes the serving CA and the API server's certificate, the service-account key and
// the kubelet-client CA and certificate (package pki), where envtest and the daemons read them.
// It returns the serving CA's PEM.
func writePKI(l layout) ([]byte, error) {
	serving, _, err := pki.LoadOrCreateCA(filepath.Join(l.pki(), "serving"), pki.CAOptions{CommonName: "vmlet-cluster-ca"})
	if err != nil {
		return nil, err
	}
	cert, err := serving.Issue(pki.Node{Name: "kubernetes", Addrs: []netip.Addr{Gateway, KubernetesSvc, netip.MustParseAddr("127.0.0.1")}},
		pki.IssueOptions{Lifetime: 365 * 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	sa, _, err := pki.LoadOrCreateCA(filepath.Join(l.pki(), "service-accounts"), pki.CAOptions{CommonName: "vmlet-cluster-sa"})
	if err != nil {
		return nil, err
	}
	kc, _, err := pki.LoadOrCreateCA(filepath.Join(l.pki(), "kubelet-client"), pki.CAOptions{CommonName: "vmlet-cluster-kubelet-client-ca"})
	if err != nil {
		return nil, err
	}
	kcert, err := kc.Issue(pki.Node{Name: kubeletClientUser}, pki.IssueOptions{Lifetime: 365 * 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		filepath.Join(l.apiserver(), servingCert):          cert.CertPEM,
		filepath.Join(l.apiserver(), servingKey):           cert.KeyPEM,
		filepath.Join(l.apiserver(), saCert):               sa.CertPEM,
		filepath.Join(l.apiserver(), saKey):                sa.KeyPEM,
		filepath.Join(l.apiserver(), "serving-ca.crt"):     serving.CertPEM,
		filepath.Join(l.apiserver(), "kubelet-client.crt"): kcert.CertPEM,
		filepath.Join(l.apiserver(), "kubelet-client.key"): kcert.KeyPEM,
		filepath.Join(l.pki(), "kubelet-client", "ca.crt"): kc.CertPEM,
	}
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
	}
	return serving.CertPEM, nil
}

// startAPIServer starts etcd and kube-apiserver through envtest's control plane (as test/apienv
// does), with the layout's folders, the cluster's certificates, Node+RBAC authorization, the
// ServiceAccount and NodeRestriction admission plugins, the Service range and the aggregation
// layer's front proxy. The processes
// write to log files and outlive this process (Setpgid, no parent-death signal).
func startAPIServer(ctx context.Context, l layout, bin string) (*envtest.ControlPlane, error) {
	ca, err := writePKI(l)
	if err != nil {
		return nil, err
	}
	logf := func(n string) (*os.File, error) {
		return os.OpenFile(filepath.Join(l.logs(), n+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	etcdLog, err := logf("etcd")
	if err != nil {
		return nil, err
	}
	defer etcdLog.Close()
	apiLog, err := logf("kube-apiserver")
	if err != nil {
		return nil, err
	}
	defer apiLog.Close()
	etcd := &envtest.Etcd{Path: filepath.Join(bin, "etcd"), DataDir: l.etcd(), Out: etcdLog, Err: etcdLog, StartTimeout: 2 * time.Minute}
	as := &envtest.APIServer{Path: filepath.Join(bin, "kube-apiserver"), CertDir: l.apiserver(), Out: apiLog, Err: apiLog, StartTimeout: 3 * time.Minute}
	// Both address and port set, or envtest picks 127.0.0.1 with a free port of its own.
	port, err := freePort(Gateway)
	if err != nil {
		return nil, err
	}
	as.Address, as.Port = Gateway.String(), strconv.Itoa(port)
	as.CA = ca
	a := as.Configure()
	a.Set("advertise-address", Gateway.String())
	a.Set("service-cluster-ip-range", ServiceSubnet.String())
	a.Set("authorization-mode", "Node,RBAC")
	a.Set("disable-admission-plugins", "")
	a.Set("enable-admission-plugins", "NodeRestriction")
	a.Set("service-account-issuer", "https://kubernetes.default.svc")
	a.Set("api-audiences", "https://kubernetes.default.svc")
	a.Set("kubelet-client-certificate", filepath.Join(l.apiserver(), "kubelet-client.crt"))
	a.Set("kubelet-client-key", filepath.Join(l.apiserver(), "kubelet-client.key"))
	a.Set("kubelet-preferred-address-types", "InternalIP")
	a.Set("allow-privileged", "true")
	a.Set("endpoint-reconciler-type", "lease")
	// The aggregation layer's front proxy (its requestheader CA and client certificate), so
	// that aggregated APIs (vmlet's subresources) learn who is calling.
	fp, err := subresources.FrontProxyFlags(filepath.Join(l.pki(), "front-proxy"))
	if err != nil {
		return nil, err
	}
	for k, v := range fp {
		a.Set(k, v)
	}
	cp := &envtest.ControlPlane{Etcd: etcd, APIServer: as}
	if err := cp.Start(); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	return cp, ctx.Err()
}

// writeUsers renders the admin kubeconfig and one per component (and each node's), and sets
// c.Config.
func (c *Cluster) writeUsers(cp *envtest.ControlPlane) error {
	all := map[string]envtest.User{}
	for _, n := range c.Nodes {
		all["kubelet-"+n.Name] = envtest.User{Name: "system:node:" + n.Name, Groups: []string{"system:nodes"}}
	}
	for k, v := range users {
		all[k] = v
	}
	for name, u := range all {
		au, err := cp.AddUser(u, &rest.Config{QPS: 50, Burst: 100})
		if err != nil {
			return fmt.Errorf("add user %s: %w", u.Name, err)
		}
		kc, err := au.KubeConfig()
		if err != nil {
			return err
		}
		p := c.l.userKubeconfig(name)
		if name == "admin" {
			p = c.l.kubeconfig()
			c.Config = au.Config()
		}
		if err := os.WriteFile(p, kc, 0o600); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(c.Config.Host, "https://") {
		return fmt.Errorf("unexpected API server URL %q", c.Config.Host)
	}
	return nil
}

// freePort is a TCP port free on addr now.
func freePort(addr netip.Addr) (int, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", addr, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
