package realclustere2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
)

const masqueradeSpec = `spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      interfaces:
      - name: default
        masquerade: {}
        ports:
        - {name: http, port: 8080, protocol: TCP}
  networks:
  - name: default
    pod: {}
  volumes:
  - name: root
    containerDisk: {image: ` + diskImage + `}
`

// TestMasqueradePodNetwork: a masquerade VMI on the CNI-made pod network reaches a server in
// another pod (the agent's metrics at its pod IP) from the guest, and its declared port is
// served at the launcher pod's IP by a server in the guest.
func TestMasqueradePodNetwork(t *testing.T) {
	need(t)
	t.Parallel()
	name := "masq-" + suffix()
	createVMI(t, name, masqueradeSpec)
	vmi := waitBooted(t, name)
	pod := scheduled(t, vmi)
	fp := nodeFootprint(t, vmi, pod)
	agent := agentPod(t)
	if agent == nil || agent.Status.PodIP == "" {
		t.Fatal("no agent pod IP")
	}
	c, typ := console(t, fp)
	typ("") // a prompt
	if rc := run(t, c, typ, "wget -q -T 10 -O /tmp/m http://"+net.JoinHostPort(agent.Status.PodIP, "9250")+"/metrics && grep -q '# TYPE' /tmp/m", time.Minute); rc != 0 {
		t.Fatalf("the guest cannot fetch the agent pod's metrics (%s:9250): exit %d; console: %s", agent.Status.PodIP, rc, poll.Tail(c.String(), 1500))
	}
	t.Logf("guest → agent pod %s:9250 (another pod) over masquerade: ok", agent.Status.PodIP)

	token := "vmlet-" + suffix()
	if rc := run(t, c, typ, "mkdir -p /tmp/www && echo "+token+" >/tmp/www/index.html && httpd -p 8080 -h /tmp/www", 30*time.Second); rc != 0 {
		t.Fatalf("start httpd in the guest: exit %d", rc)
	}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/index.html"
	poll.Until(t, time.Minute, "the declared port answers at the pod IP", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b)) == token, fmt.Sprintf("%s: %q", resp.Status, b)
	})
	t.Logf("%s (the launcher pod's IP, port 8080 declared) → the guest's httpd: ok", url)
	deleteVMI(t, name)
	assertGone(t, fp)
}
