package vmistream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/internal/nofollow"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// Paths inside a launcher's run folder this server opens (relative: resolved beneath the run
// folder without following symlinks).
const (
	launcherSocket = "launcher.sock"
	consoleSocket  = "sockets/console.sock"
	vncSocket      = "sockets/vnc.sock"
)

// Config is what the server needs of its node agent.
type Config struct {
	// Client reads VMIs (the agent's cache).
	Client   client.Reader
	NodeName string
	// RunDir is a launcher's run folder by VMI UID (controllers.LauncherRuntime.Dir).
	RunDir func(uid string) string
	// Guest is where the node reaches a VMI's guest (controllers.NodeNetwork.GuestEndpoint);
	// nil: port-forward answers 409.
	Guest func(uid types.UID) (netns string, addr netip.Addr, err error)
	// Recorder records each QMP command as an Event on its VMI.
	Recorder events.EventRecorder
	Log      logr.Logger
}

// Server serves the node's VMI streams. Use Handler, or Serve on a listener.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	mu       sync.Mutex
	sessions map[string]*session // "uid/console", "uid/vnc": the one client of each
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, mux: http.NewServeMux(), sessions: map[string]*session{}}
	const p = "/v1/namespaces/{ns}/virtualmachineinstances/{name}/"
	s.mux.HandleFunc("GET "+p+"console", s.withVMI(s.console))
	s.mux.HandleFunc("GET "+p+"vnc", s.withVMI(s.vnc))
	s.mux.HandleFunc("GET "+p+"vnc/screenshot", s.withVMI(s.screenshot))
	s.mux.HandleFunc("POST "+p+"qmp", s.withVMI(s.qmpOne))
	s.mux.HandleFunc("GET "+p+"qmp", s.withVMI(s.qmpSession))
	s.mux.HandleFunc("GET "+p+"qmplog", s.withVMI(s.qmpLog))
	s.mux.HandleFunc("GET "+p+"guestosinfo", s.withVMI(s.guestOSInfo))
	s.mux.HandleFunc("GET "+p+"userlist", s.withVMI(s.userList))
	s.mux.HandleFunc("GET "+p+"filesystemlist", s.withVMI(s.filesystemList))
	s.mux.HandleFunc("GET "+p+"portforward/{port}", s.withVMI(s.portForward))
	return s
}

// Handler is the server's HTTP handler (no authentication: wrap it in mTLS, as Serve does).
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves on ln with tlsConfig (ServerTLS) until ctx ends; streams still open then are
// closed.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config) error {
	hs := &http.Server{Handler: s.mux, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	err := hs.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve vmi streams: %w", err)
}

// target is the VMI a request is about, running on this node.
type target struct {
	vmi    *vmletv1.VirtualMachineInstance
	runDir string
	caller string
}

var vmiResource = schema.GroupResource{Group: vmletv1.GroupVersion.Group, Resource: "virtualmachineinstances"}

// withVMI resolves the VMI named in the path: 404 when missing, 409 when it does not run on
// this node.
func (s *Server) withVMI(h func(http.ResponseWriter, *http.Request, *target)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
		vmi := &vmletv1.VirtualMachineInstance{}
		if err := s.cfg.Client.Get(r.Context(), key, vmi); err != nil {
			if apierrors.IsNotFound(err) {
				WriteStatus(w, apierrors.NewNotFound(vmiResource, key.Name))
				return
			}
			WriteStatus(w, apierrors.NewInternalError(err))
			return
		}
		if vmi.Status.NodeName != s.cfg.NodeName || vmi.Status.Phase != vmletv1.Running {
			WriteStatus(w, apierrors.NewConflict(vmiResource, key.Name,
				fmt.Errorf("not running on node %s (phase %q, node %q)", s.cfg.NodeName, vmi.Status.Phase, vmi.Status.NodeName)))
			return
		}
		h(w, r, &target{vmi: vmi, runDir: s.cfg.RunDir(string(vmi.UID)), caller: r.Header.Get(HeaderCaller)})
	}
}

// dialLauncher connects to the VMI's launcher (its socket opened without following symlinks).
func (t *target) dialLauncher(ctx context.Context) (*launcher.Client, error) {
	dir := t.runDir
	return launcher.Dial(ctx, filepath.Join(dir, launcherSocket), grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return nofollow.DialUnix(ctx, dir, launcherSocket)
	}))
}

// WriteStatus writes err as a metav1.Status JSON body with its code (an internal error unless
// err carries an API status); the aggregated server answers with it too.
func WriteStatus(w http.ResponseWriter, err error) {
	st := apierrors.APIStatus(nil)
	if !errors.As(err, &st) {
		st = apierrors.NewInternalError(err)
	}
	s := st.Status()
	s.Kind, s.APIVersion = "Status", "v1"
	if s.Status == "" {
		s.Status = metav1.StatusFailure
	}
	WriteJSON(w, int(s.Code), &s)
}

// WriteJSON writes v as a JSON body with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
