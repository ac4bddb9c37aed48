package realclustere2e_test

import (
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
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
	b := boot(t, "masq", masqueradeSpec)
	name, pod, fp := b.name, b.pod, b.fp
	agent := agentPod(t)
	if agent == nil || agent.Status.PodIP == "" {
		t.Fatal("no agent pod IP")
	}
	waitSerial(t, fp, testguest.MarkerReady) // its shell runs on the console after this
	c, typ := console(t, fp)
	// busybox nc (its static wget crashes in this guest); the server answers HTTP/1.0.
	get := `printf 'GET /metrics HTTP/1.0\r\n\r\n' | nc -w 10 ` + agent.Status.PodIP + ` 9250 | grep -q '^# TYPE'`
	if rc := run(t, c, typ, get, time.Minute); rc != 0 {
		t.Fatalf("the guest cannot fetch the agent pod's metrics (%s:9250): exit %d; console: %s", agent.Status.PodIP, rc, poll.Tail(c.String(), 1500))
	}
	t.Logf("guest → agent pod %s:9250 (another pod) over masquerade: ok", agent.Status.PodIP)

	token := "vmlet-" + suffix()
	if rc := run(t, c, typ, "nc -ll -p 8080 -e echo "+token+" </dev/null >/dev/null 2>&1 & true", 30*time.Second); rc != 0 {
		t.Fatalf("start a server in the guest: exit %d", rc)
	}
	waitServed(t, pod, token) // the declared port answers at the pod IP
	t.Logf("%s:8080 (the launcher pod's IP, port 8080 declared) → the guest's server: ok", pod.Status.PodIP)
	deleteVMI(t, name)
	assertGone(t, fp)
}
