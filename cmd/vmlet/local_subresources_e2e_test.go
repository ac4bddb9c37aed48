package main_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistream"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
	"github.com/vmlet/vmlet/test/wsread"
)

// TestLocalSubresources: `vmlet local`'s embedded kube-apiserver serves the aggregated
// subresources.vmlet.dev API, and ServiceAccounts bound to config/rbac's vmlet.dev:view, edit
// and admin (and a custom Role with only qmp) reach a real guest by name through it, each as
// far as its role allows: view reads guest info but gets 403 on console, qmp and pause; edit
// types a command into the guest's shell over the console websocket and reads its output,
// pauses (spec.paused) and port-forwards to a guest port no interface declares, but gets 403 on
// qmp; admin runs a websocket QMP session (stop/cont included: no allow-list) and follows the
// QMP log, which names the caller; the qmp-only user runs query-status but its quit is refused
// (and the VM keeps running); every command is an Event on the VMI. A second console client
// takes over and the first is closed with vmistream.CloseTakenOver. The default display answers
// vnc (an RFB greeting) and vnc/screenshot (a PNG). Then the vmctl binary does the same by name
// (vmctlThroughTheAPI).
func TestLocalSubresources(t *testing.T) {
	s := newLocalSetup(t)
	p := s.run(t, append(s.commonArgs(), "--demo", "", "--node-subnet", "198.19.203.0/24")...)
	p.waitOutput(t, "node "+localNode+" registered", 3*time.Minute)
	c := s.client(t)
	admin := restConfig(t, s.stateDir)
	ctx := context.Background()
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(s.assets, "kubectl"), append([]string{"--kubeconfig", filepath.Join(s.stateDir, "kubeconfig")}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	kubectl("apply", "-f", filepath.Join(apienv.RepoRoot(), "config", "rbac", "subresources_roles.yaml"))
	cs := kubernetes.NewForConfigOrDie(admin)
	qmpOnly := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "qmp-only"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"subresources.vmlet.dev"}, Resources: []string{"virtualmachineinstances/qmp"}, Verbs: []string{"get", "create"}}}}
	if _, err := cs.RbacV1().Roles("default").Create(ctx, qmpOnly, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	vmi := masqueradeVMI("sub")
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	vm := s.running(t, c, "sub")
	waitFile(t, filepath.Join(s.runRoot, vm.uid, "logs", "serial.log"), testguest.MarkerReady, 3*time.Minute)
	sock := filepath.Join(s.runRoot, vm.uid, "launcher.sock")
	waitGuestAgent(t, sock)

	view := newAPIUser(t, admin, "viewer", "ClusterRole", "vmlet.dev:view", "sub")
	edit := newAPIUser(t, admin, "editor", "ClusterRole", "vmlet.dev:edit", "sub")
	adm := newAPIUser(t, admin, "admin", "ClusterRole", "vmlet.dev:admin", "sub")
	qmpUser := newAPIUser(t, admin, "qmpuser", "Role", "qmp-only", "sub")

	// The APIService becomes available once kube-apiserver reached the in-process server.
	poll.Until(t, time.Minute, "subresources.vmlet.dev served", func() (bool, string) {
		code, body := view.do(t, http.MethodGet, "guestosinfo", "")
		return code == http.StatusOK, body
	})

	// view: guest info, as the guest itself says.
	code, body := view.do(t, http.MethodGet, "guestosinfo", "")
	var info vmistream.GuestAgentInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil || code != http.StatusOK {
		t.Fatalf("guestosinfo: %d %s (%v)", code, body, err)
	}
	uname := strings.Fields(guestSh(t, sock, "uname -r; uname -m; hostname"))
	if info.OS.KernelRelease != uname[0] || info.OS.Machine != uname[1] || info.Hostname != uname[2] {
		t.Errorf("guestosinfo %+v, hostname %q; the guest says kernel %s, machine %s, hostname %s", info.OS, info.Hostname, uname[0], uname[1], uname[2])
	}
	if osr := guestSh(t, sock, "cat /etc/os-release 2>/dev/null || true"); osr != "" {
		if id := osReleaseField(osr, "ID"); info.OS.ID != id {
			t.Errorf("guestosinfo os.id %q, the guest's os-release says %q", info.OS.ID, id)
		}
	}
	for _, sub := range []string{"userlist", "filesystemlist"} {
		if code, body := view.do(t, http.MethodGet, sub, ""); code != http.StatusOK || !strings.Contains(body, `"items"`) {
			t.Errorf("%s as view: %d %s", sub, code, body)
		}
	}
	// view: no console, no qmp, no pause.
	if _, code := view.ws(t, "console"); code != http.StatusForbidden {
		t.Errorf("console as view: %d, want 403", code)
	}
	if code, body := view.do(t, http.MethodPost, "qmp", `{"execute":"query-status"}`); code != http.StatusForbidden {
		t.Errorf("qmp as view: %d %s, want 403", code, body)
	}
	if code, _ := view.do(t, http.MethodPut, "pause", ""); code != http.StatusForbidden {
		t.Errorf("pause as view: %d, want 403", code)
	}

	// edit: the console round trip, typed into the guest's shell.
	con, code := edit.ws(t, "console")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("console as edit: %d", code)
	}
	if err := con.WriteMessage(websocket.BinaryMessage, []byte("echo sub-$((6*7))-done\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, con, "sub-42-done", time.Minute)
	// A second console client takes over; the first is told.
	con2, code := edit.ws(t, "console")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("second console as edit: %d", code)
	}
	wantTakenOver(t, con, "console")
	if err := con2.WriteMessage(websocket.BinaryMessage, []byte("echo second-$((1+1))\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, con2, "second-2", time.Minute)
	con2.Close()
	if code, body := edit.do(t, http.MethodPost, "qmp", `{"execute":"query-status"}`); code != http.StatusForbidden {
		t.Errorf("qmp as edit: %d %s, want 403", code, body)
	}

	// edit: pause and unpause through spec.paused.
	if code, body := edit.do(t, http.MethodPut, "pause", ""); code != http.StatusOK {
		t.Fatalf("pause as edit: %d %s", code, body)
	}
	waitFor(t, c, vm.key, time.Minute, "Paused", func(v *vmletv1.VirtualMachineInstance) bool { return v.Spec.Paused && isTrue(v, "Paused") })
	if code, _ := edit.do(t, http.MethodPut, "pause", ""); code != http.StatusConflict {
		t.Errorf("pause of a paused VMI: %d, want 409", code)
	}
	if code, body := edit.do(t, http.MethodPut, "unpause", ""); code != http.StatusOK {
		t.Fatalf("unpause as edit: %d %s", code, body)
	}
	waitFor(t, c, vm.key, time.Minute, "not Paused", func(v *vmletv1.VirtualMachineInstance) bool { return !v.Spec.Paused && !isTrue(v, "Paused") })

	// edit: port-forward to a port no interface declares (the VMI declares 22 only).
	guestSh(t, sock, "ip link set lo up; nc -ll -p 7777 -e echo forwarded-hello </dev/null >/dev/null 2>&1 &")
	poll.Until(t, time.Minute, "port-forward to guest port 7777 reads forwarded-hello", func() (bool, string) {
		pf, code := edit.ws(t, "portforward/7777")
		if code != http.StatusSwitchingProtocols {
			return false, http.StatusText(code)
		}
		defer pf.Close()
		got, err := wsread.Until(pf, "forwarded-hello", 10*time.Second)
		return err == nil, got
	})

	// qmp-only: the allow-list (default query-*).
	code, body = qmpUser.do(t, http.MethodPost, "qmp", `{"execute":"query-status"}`)
	if ret, class := qmpReply(t, body); code != http.StatusOK || class != "" || !strings.Contains(string(ret), `"running"`) {
		t.Errorf("query-status as the qmp-only user: %d %s", code, body)
	}
	if code, body := qmpUser.do(t, http.MethodPost, "qmp", `{"execute":"quit"}`); code != http.StatusForbidden || !strings.Contains(body, "allow-list") {
		t.Errorf("quit as the qmp-only user: %d %s, want 403 naming the allow-list", code, body)
	}
	if code, _ := qmpUser.do(t, http.MethodGet, "qmplog", ""); code != http.StatusForbidden {
		t.Errorf("qmplog as the qmp-only user: %d, want 403", code)
	}
	// The cluster's allow-list (vmlet-system/vmlet-config qmpAllowList) replaces the default;
	// a namespace's annotation replaces the cluster's.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "vmlet-system", Name: "vmlet-config"},
		Data: map[string]string{"qmpAllowList": "query-name"}}
	if _, err := cs.CoreV1().ConfigMaps("vmlet-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	allowed := func(cmd string) bool {
		t.Helper()
		code, body := qmpUser.do(t, http.MethodPost, "qmp", `{"execute":"`+cmd+`"}`)
		if code != http.StatusOK && code != http.StatusForbidden {
			t.Fatalf("%s as the qmp-only user: %d %s", cmd, code, body)
		}
		return code == http.StatusOK
	}
	if allowed("query-status") || !allowed("query-name") {
		t.Errorf("cluster allow-list query-name: query-status allowed %v, query-name allowed %v", allowed("query-status"), allowed("query-name"))
	}
	kubectl("annotate", "namespace", "default", "vmlet.dev/qmp-allow-list=query-status,query-version")
	if !allowed("query-status") || !allowed("query-version") || allowed("query-name") {
		t.Errorf("namespace allow-list query-status,query-version: query-status %v, query-version %v, query-name %v",
			allowed("query-status"), allowed("query-version"), allowed("query-name"))
	}

	// vnc and its screenshot: the VMI has the default display.
	w, code := edit.ws(t, "vnc")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("vnc as edit: %d, want a websocket", code)
	}
	if got := readUntil(t, w, "RFB 00", 30*time.Second); !strings.HasPrefix(got, "RFB 00") {
		t.Errorf("vnc: first bytes %q, want an RFB greeting", got)
	}
	// A second VNC client takes the display over; the first is told, as on the console.
	w2, code := edit.ws(t, "vnc")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("second vnc as edit: %d", code)
	}
	if got := readUntil(t, w2, "RFB 00", 30*time.Second); !strings.HasPrefix(got, "RFB 00") {
		t.Errorf("second vnc: first bytes %q, want an RFB greeting", got)
	}
	wantTakenOver(t, w, "vnc")
	w2.Close()
	if code, body := edit.do(t, http.MethodGet, "vnc/screenshot", ""); code != http.StatusOK || !strings.HasPrefix(body, "\x89PNG") {
		t.Errorf("vnc/screenshot as edit: %d %.80q, want a PNG", code, body)
	}
	if code, _ := view.do(t, http.MethodGet, "vnc/screenshot", ""); code != http.StatusForbidden {
		t.Errorf("vnc/screenshot as view: %d, want 403", code)
	}

	// admin: follow the QMP log, then a websocket session of several commands.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	logLines := adm.stream(t, fctx, "qmplog?tail=0&follow=true")
	q, code := adm.ws(t, "qmp")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("qmp websocket as admin: %d", code)
	}
	for _, cmd := range []string{`{"execute":"query-status"}`, `{"execute":"stop"}`, `{"execute":"query-status"}`, `{"execute":"cont"}`, `{"execute":"query-name","id":"n1"}`} {
		if err := q.WriteMessage(websocket.TextMessage, []byte(cmd)); err != nil {
			t.Fatal(err)
		}
		_, reply, err := q.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if _, class := qmpReply(t, string(reply)); class != "" {
			t.Errorf("%s as admin: %s", cmd, reply)
		}
		if cmd == `{"execute":"query-status"}` && !strings.Contains(string(reply), `"status"`) {
			t.Errorf("%s: %s", cmd, reply)
		}
	}
	q.Close()
	seen := map[string]bool{}
	for len(seen) < 3 && logLines.Scan() {
		var e vmistream.LogEntry
		if err := json.Unmarshal(logLines.Bytes(), &e); err != nil {
			t.Fatalf("qmplog line %q: %v", logLines.Text(), err)
		}
		if e.Direction == "cmd" && e.Caller == adm.name {
			for _, name := range []string{"stop", "cont", "query-name"} {
				if strings.Contains(e.Text, `"`+name+`"`) {
					seen[name] = true
				}
			}
		}
	}
	if len(seen) < 3 {
		t.Errorf("qmplog follow: saw %v of stop, cont, query-name with caller %s (err %v)", seen, adm.name, logLines.Err())
	}
	cancel()

	vmctlThroughTheAPI(t, s, view, edit, adm, uname)

	// Every command through the API is an Event on the VMI, with the caller's name.
	poll.Until(t, time.Minute, "QMP events on the VMI", func() (bool, string) {
		evs, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ran, refused bool
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Name != "sub" {
				continue
			}
			notes = append(notes, e.Reason+": "+e.Note)
			ran = ran || (e.Reason == vmistream.ReasonQMPCommand && strings.Contains(e.Note, adm.name) && strings.Contains(e.Note, `"stop"`))
			refused = refused || (e.Reason == vmistream.ReasonQMPRefused && strings.Contains(e.Note, qmpUser.name) && strings.Contains(e.Note, `"quit"`))
		}
		return ran && refused, strings.Join(notes, "\n")
	})
	if v := waitFor(t, c, vm.key, 10*time.Second, "Running", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Running }); !poll.Alive(int(v.Status.Launcher.PID)) {
		t.Error("QEMU is gone after the refused quit")
	}
}

// wantTakenOver reads c until it closes and fails unless it was closed with
// vmistream.CloseTakenOver (another client took the stream over).
func wantTakenOver(t *testing.T, c *websocket.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		if !websocket.IsCloseError(err, vmistream.CloseTakenOver) {
			t.Errorf("first %s after a takeover: %v, want close %d", what, err, vmistream.CloseTakenOver)
		}
		return
	}
}

// osReleaseField is KEY's value in an os-release file.
func osReleaseField(osr, key string) string {
	for _, l := range strings.Split(osr, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
