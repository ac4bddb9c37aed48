package subresources_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/subresources"
	"github.com/vmlet/vmlet/pki"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestAggregatedServer: a real kube-apiserver with the aggregation layer (apienv Aggregation)
// routes subresources.vmlet.dev to the server running in the test (an ExternalName Service
// "localhost", RegisterLocal), which authorizes by RBAC with config/rbac's roles through
// delegated SubjectAccessReview: discovery lists the subresources; a user with no binding gets
// 403; vmlet.dev:edit gets 404 for a missing VMI, 409 for a VMI whose node publishes no streams
// address, and pauses and unpauses through spec.paused (409 when already so); view may not
// pause. No node agent and no QEMU: the node side is TestLocalSubresources's.
func TestAggregatedServer(t *testing.T) {
	prereq.APIServer(t)
	env, err := apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme}, Aggregation: true})
	if err != nil {
		t.Fatalf("start api server: %v", err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := subresources.NewCreds(ca)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := subresources.New(subresources.Config{Listener: ln, ServingCertPEM: creds.Serving.CertPEM, ServingKeyPEM: creds.Serving.KeyPEM,
		Kubeconfig: env.Kubeconfig, Client: env.Client, NodeTLS: creds.NodeTLS()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("aggregated server: %v", err)
		}
	}()
	if err := subresources.RegisterLocal(ctx, env.Client, ca.CertPEM, int32(ln.Addr().(*net.TCPAddr).Port)); err != nil {
		t.Fatal(err)
	}
	applyRoles(t, ctx, env.Client)
	for user, role := range map[string]string{"alice": "vmlet.dev:edit", "victor": "vmlet.dev:view"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if err := env.Client.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm"}}
	mem := resource.MustParse("128Mi")
	vmi.Spec.Domain.Memory = &vmletv1.Memory{Guest: &mem}
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	vmi.Status.Phase, vmi.Status.NodeName = vmletv1.Running, "node-x"
	if err := env.Client.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x"}}); err != nil {
		t.Fatal(err)
	}

	as := func(user, method, path string) (int, string) {
		t.Helper()
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(cfg.Host, "/")+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const gv = "/apis/subresources.vmlet.dev/v1alpha1"
	sub := func(name, s string) string {
		return gv + "/namespaces/default/virtualmachineinstances/" + name + "/" + s
	}
	poll.Until(t, time.Minute, "APIService served", func() (bool, string) {
		code, body := as("alice", http.MethodGet, gv)
		return code == http.StatusOK, body
	})
	if _, body := as("alice", http.MethodGet, gv); !strings.Contains(body, "virtualmachineinstances/console") || !strings.Contains(body, "virtualmachineinstances/qmp") {
		t.Errorf("discovery: %s", body)
	}
	for _, c := range []struct {
		user, method, path string
		want               int
		body               string
	}{
		{"bob", http.MethodGet, sub("vm", "console"), http.StatusForbidden, "virtualmachineinstances/console"},
		{"alice", http.MethodGet, sub("nope", "guestosinfo"), http.StatusNotFound, "nope"},
		{"alice", http.MethodGet, sub("vm", "guestosinfo"), http.StatusConflict, "streams-address"},
		{"alice", http.MethodPost, sub("vm", "qmp"), http.StatusForbidden, "virtualmachineinstances/qmp"},
		{"victor", http.MethodPut, sub("vm", "pause"), http.StatusForbidden, "pause"},
		{"alice", http.MethodPut, sub("vm", "pause"), http.StatusOK, "{}"},
		{"alice", http.MethodPut, sub("vm", "pause"), http.StatusConflict, "already paused"},
		{"alice", http.MethodPut, sub("vm", "unpause"), http.StatusOK, "{}"},
	} {
		code, body := as(c.user, c.method, c.path)
		if code != c.want || !strings.Contains(body, c.body) {
			t.Errorf("%s %s as %s: %d %s, want %d with %q", c.method, c.path, c.user, code, body, c.want, c.body)
		}
		if strings.HasSuffix(c.path, "/pause") && code == http.StatusOK {
			got := &vmletv1.VirtualMachineInstance{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), got); err != nil || !got.Spec.Paused {
				t.Errorf("after pause: spec.paused %v (%v)", got.Spec.Paused, err)
			}
		}
	}
}

// applyRoles creates config/rbac/subresources_roles.yaml's ClusterRoles.
func applyRoles(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(apienv.RepoRoot(), "config", "rbac", "subresources_roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		role := &rbacv1.ClusterRole{}
		if err := dec.Decode(role); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, role); err != nil {
			t.Fatal(err)
		}
	}
}
