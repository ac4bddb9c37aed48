package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/wsread"
)

// apiUser is a ServiceAccount of the test, talking to kube-apiserver with its bearer token
// (what kube-apiserver authenticates and the aggregator forwards as X-Remote-User).
type apiUser struct {
	name string // the user name: system:serviceaccount:default:<sa>
	cfg  *rest.Config
	hc   *http.Client
	ns   string
	vmi  string
}

// newAPIUser creates ServiceAccount sa, binds it to role (a ClusterRole, or a Role with
// namespaced) in default, and returns it with a token.
func newAPIUser(t *testing.T, admin *rest.Config, sa, roleKind, role, vmi string) *apiUser {
	t.Helper()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(admin)
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "default"}}}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tok.Status.Token
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &apiUser{name: "system:serviceaccount:default:" + sa, cfg: cfg, hc: hc, ns: "default", vmi: vmi}
}

// restConfig is the admin config of the local stack.
func restConfig(t *testing.T, stateDir string) *rest.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (u *apiUser) path(sub string) string {
	return fmt.Sprintf("/apis/subresources.vmlet.dev/v1alpha1/namespaces/%s/virtualmachineinstances/%s/%s", u.ns, u.vmi, sub)
}

// do sends one request and returns the status code and body.
func (u *apiUser) do(t *testing.T, method, sub, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(u.cfg.Host, "/")+u.path(sub), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, sub, u.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stream opens a streaming GET (qmplog follow); the caller closes the body.
func (u *apiUser) stream(t *testing.T, ctx context.Context, sub string) *bufio.Scanner {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(u.cfg.Host, "/")+u.path(sub), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s as %s: %d %s", sub, u.name, resp.StatusCode, b)
	}
	return bufio.NewScanner(resp.Body)
}

// ws opens a websocket on sub; it returns the HTTP status of a refused upgrade.
func (u *apiUser) ws(t *testing.T, sub string) (*websocket.Conn, int) {
	t.Helper()
	tc, err := rest.TLSConfigFor(u.cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{TLSClientConfig: tc, Subprotocols: []string{"plain.kubevirt.io"}, HandshakeTimeout: 30 * time.Second}
	url := "wss://" + strings.TrimPrefix(strings.TrimSuffix(u.cfg.Host, "/"), "https://") + u.path(sub)
	c, resp, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + u.cfg.BearerToken}})
	if resp != nil {
		defer resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			return nil, resp.StatusCode
		}
		t.Fatalf("websocket %s as %s: %v", sub, u.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, http.StatusSwitchingProtocols
}

// readUntil reads binary messages from c until their bytes contain want.
func readUntil(t *testing.T, c *websocket.Conn, want string, d time.Duration) string {
	t.Helper()
	got, err := wsread.Until(c, want, d)
	if err != nil {
		t.Fatalf("%v; got %q", err, poll.Tail(got, 2000))
	}
	return got
}

// qmpReply decodes a QMP reply; class is the error class ("" on success).
func qmpReply(t *testing.T, s string) (ret json.RawMessage, class string) {
	t.Helper()
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("qmp reply %q: %v", s, err)
	}
	if r.Error != nil {
		return nil, r.Error.Class
	}
	return r.Return, ""
}
