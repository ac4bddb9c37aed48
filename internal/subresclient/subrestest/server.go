package subrestest

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// Role is what a user may do, as the ClusterRoles of issue #17 say.
type Role int

const (
	// View is guest info only.
	View Role = iota
	// Edit is View + console, vnc, portforward, pause/unpause, and the query-* QMP commands.
	Edit
	// Admin is Edit + every QMP command, qmplog.
	Admin
)

// VMI is one VM the server knows.
type VMI struct {
	// Running false answers 409 to the streams and qmp (VMI not running).
	Running bool
	// Paused is the guest's state (stop/cont, pause/unpause change it).
	Paused bool
	// Commands are query-commands' names (default: the commands the fake QMP peer knows).
	Commands []string
	// Info, Users, Filesystems are the guest agent's answers.
	Info        subresclient.GuestAgentInfo
	Users       []subresclient.GuestOSUser
	Filesystems []subresclient.FileSystem
	// Ports maps a guest port to the TCP address portforward/{port} connects to.
	Ports map[int]string

	console *websocket.Conn
	log     []subresclient.QMPLogEntry
	logCh   chan struct{} // closed and replaced when log grows
	cmds    int
}

// Server is the fake API server.
type Server struct {
	*httptest.Server

	mu    sync.Mutex
	users map[string]user // by bearer token
	vmis  map[string]*VMI // by namespace/name
}

type user struct {
	name string
	role Role
}

// New starts a server (stopped at the test's end). Add users and VMIs before using it.
func New(t testing.TB) *Server {
	s := &Server{users: map[string]user{}, vmis: map[string]*VMI{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// AddUser lets token authenticate as name with role.
func (s *Server) AddUser(token, name string, role Role) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[token] = user{name: name, role: role}
}

// AddVMI adds (or replaces) a VMI; the returned pointer is the server's (use With to change it).
func (s *Server) AddVMI(namespace, name string, v *VMI) *VMI {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.Commands == nil {
		v.Commands = []string{"query-status", "query-commands", "query-name", "query-block", "stop", "cont", "quit"}
	}
	v.logCh = make(chan struct{})
	s.vmis[namespace+"/"+name] = v
	return v
}

// With runs f on the VMI under the server's lock.
func (s *Server) With(namespace, name string, f func(*VMI)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.vmis[namespace+"/"+name])
}

// QMPLog is a copy of the VMI's QMP log.
func (s *Server) QMPLog(namespace, name string) []subresclient.QMPLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]subresclient.QMPLogEntry(nil), s.vmis[namespace+"/"+name].log...)
}

// Kubeconfig writes a kubeconfig for the server in dir: context "fake" (the current one) as
// the user of token, with namespace ns.
func (s *Server) Kubeconfig(t testing.TB, dir, token, ns string) string {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fake"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["fake"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["fake"] = &clientcmdapi.Context{Cluster: "fake", AuthInfo: "fake", Namespace: ns}
	cfg.CurrentContext = "fake"
	path := filepath.Join(dir, "kubeconfig-"+token)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// status writes a metav1.Status error as the API server does.
func status(w http.ResponseWriter, code int, reason metav1.StatusReason, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: fmt.Sprintf(format, args...),
	})
}

var upgrader = websocket.Upgrader{Subprotocols: []string{subresclient.Subprotocol}}

// needs is the role each subresource needs.
var needs = map[string]Role{
	"guestosinfo": View, "userlist": View, "filesystemlist": View,
	"console": Edit, "vnc": Edit, "vnc/screenshot": Edit, "portforward": Edit, "pause": Edit, "unpause": Edit,
	"qmp": Edit, "qmplog": Admin,
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	const prefix = "/apis/subresources.vmlet.dev/v1alpha1/namespaces/"
	s.mu.Lock()
	u, ok := s.users[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	s.mu.Unlock()
	if !ok {
		status(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, prefix), "/")
	if !strings.HasPrefix(r.URL.Path, prefix) || len(parts) < 4 || parts[1] != subresclient.Resource {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
		return
	}
	ns, name, sub := parts[0], parts[2], strings.Join(parts[3:], "/")
	port := 0
	if len(parts) == 5 && parts[3] == "portforward" {
		p, err := strconv.Atoi(parts[4])
		if err != nil {
			status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "bad port %q", parts[4])
			return
		}
		sub, port = "portforward", p
	}
	need, known := needs[sub]
	if !known {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no subresource %q", sub)
		return
	}
	if u.role < need {
		status(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			"virtualmachineinstances.subresources.vmlet.dev %q is forbidden: User %q cannot %s resource \"virtualmachineinstances/%s\" in API group \"subresources.vmlet.dev\" in the namespace %q",
			name, u.name, r.Method, sub, ns)
		return
	}
	s.mu.Lock()
	v := s.vmis[ns+"/"+name]
	running := v != nil && v.Running
	s.mu.Unlock()
	if v == nil {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "virtualmachineinstances.vmlet.dev %q not found", name)
		return
	}
	if !running {
		status(w, http.StatusConflict, metav1.StatusReasonConflict, "vmi %s/%s is not running", ns, name)
		return
	}
	switch {
	case sub == "guestosinfo":
		s.withVMI(w, v, func() any { return v.Info })
	case sub == "userlist":
		s.withVMI(w, v, func() any { return subresclient.GuestOSUserList{Items: v.Users} })
	case sub == "filesystemlist":
		s.withVMI(w, v, func() any { return subresclient.FileSystemList{Items: v.Filesystems} })
	case sub == "pause" || sub == "unpause":
		s.pause(w, v, sub == "pause")
	case sub == "vnc/screenshot":
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(Screenshot())
	case sub == "qmplog":
		s.qmpLog(w, r, v)
	case sub == "qmp" && r.Method == http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		reply, code, msg := s.qmp(v, u, body)
		if code != 0 {
			status(w, code, metav1.StatusReasonForbidden, "%s", msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	case sub == "qmp":
		s.qmpSession(w, r, v, u)
	case sub == "console":
		s.console(w, r, v)
	case sub == "vnc":
		s.vnc(w, r)
	case sub == "portforward":
		s.portForward(w, r, v, port)
	}
}

func (s *Server) withVMI(w http.ResponseWriter, v *VMI, f func() any) {
	s.mu.Lock()
	b, err := json.Marshal(f())
	s.mu.Unlock()
	if err != nil {
		status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (s *Server) pause(w http.ResponseWriter, v *VMI, pause bool) {
	s.mu.Lock()
	already := v.Paused == pause
	v.Paused = pause
	s.mu.Unlock()
	if already && pause {
		status(w, http.StatusConflict, metav1.StatusReasonConflict, "vmi is already paused")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

// Screenshot is the PNG the server serves: 64x48, left half black, right half white.
func Screenshot() []byte {
	img := image.NewGray(image.Rect(0, 0, 64, 48))
	for y := range 48 {
		for x := 32; x < 64; x++ {
			img.SetGray(x, y, color.Gray{Y: 255})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img) // cannot fail on a bytes.Buffer
	return b.Bytes()
}

// RFBGreeting is what vnc sends first, as a VNC server does.
const RFBGreeting = "RFB 003.008\n"

func (s *Server) vnc(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	if c.WriteMessage(websocket.BinaryMessage, []byte(RFBGreeting)) != nil {
		return
	}
	echo(c)
}

// echo sends back every message until the peer closes.
func echo(c *websocket.Conn) {
	for {
		mt, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		if c.WriteMessage(mt, b) != nil {
			return
		}
	}
}

// ConsoleTakenOver is the close reason the previous console client gets.
const ConsoleTakenOver = "console taken over by another client"

// console echoes the bytes it gets (as a terminal's line discipline would); a new client
// takes the console over and the old one is closed with ConsoleTakenOver.
func (s *Server) console(w http.ResponseWriter, r *http.Request, v *VMI) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	s.mu.Lock()
	old := v.console
	v.console = c
	s.mu.Unlock()
	if old != nil {
		msg := websocket.FormatCloseMessage(websocket.ClosePolicyViolation, ConsoleTakenOver)
		_ = old.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		_ = old.Close()
	}
	echo(c)
	s.mu.Lock()
	if v.console == c {
		v.console = nil
	}
	s.mu.Unlock()
}

func (s *Server) portForward(w http.ResponseWriter, r *http.Request, v *VMI, port int) {
	s.mu.Lock()
	addr, ok := v.Ports[port]
	s.mu.Unlock()
	if !ok {
		status(w, http.StatusConflict, metav1.StatusReasonConflict, "guest port %d: connection refused", port)
		return
	}
	tcp, err := net.Dial("tcp", addr)
	if err != nil {
		status(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, "guest port %d: %v", port, err)
		return
	}
	defer tcp.Close()
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := tcp.Read(buf)
			if n > 0 && c.WriteMessage(websocket.BinaryMessage, buf[:n]) != nil {
				return
			}
			if err != nil {
				msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
				_ = c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
				return
			}
		}
	}()
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			break
		}
		if _, err := tcp.Write(b); err != nil {
			break
		}
	}
	_ = tcp.Close()
	<-done
}
