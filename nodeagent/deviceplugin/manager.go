package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Defaults of Options.
const (
	DefaultResync     = 10 * time.Second
	registerTimeout   = 10 * time.Second
	firstRetry        = 500 * time.Millisecond
	kubeletSocketName = "kubelet.sock"
	socketMode        = 0o600
	defaultDirMode    = 0o750
)

// Options configure a Manager.
type Options struct {
	// Dir is the kubelet's device-plugins folder (pluginapi.DevicePluginPath when empty); the
	// kubelet's registration socket is Dir/kubelet.sock, the plugins' sockets are made next to it.
	Dir string
	// Count is how many devices each resource advertises (DefaultCount when 0).
	Count int
	// Resources are what to advertise (Select(Probe()) on a node).
	Resources []Resource
	// Resync is how often the sockets and device nodes are checked without an inotify event
	// (DefaultResync when 0), and the longest wait between registration retries.
	Resync time.Duration
	Log    logr.Logger
}

// Manager serves one device plugin per resource and keeps them registered with the kubelet.
type Manager struct {
	o Options

	mu     sync.Mutex
	served map[string]*served // by resource name; owned by Start's goroutine, read by Check
}

// served is one resource's plugin server and its registration.
type served struct {
	p      *plugin
	srv    *grpc.Server
	socket fileID // the socket file it listens on
	// kubelet is the kubelet.sock it registered with (zero: not registered).
	kubelet fileID
}

// fileID tells a file from a new one at the same path (a freed inode number may be reused at
// once: the change time tells them apart).
type fileID struct {
	dev, ino uint64
	ctime    syscall.Timespec
}

// New validates o and returns a Manager; Start runs it.
func New(o Options) (*Manager, error) {
	if o.Dir == "" {
		o.Dir = pluginapi.DevicePluginPath
	}
	if o.Count == 0 {
		o.Count = DefaultCount
	}
	if o.Resync == 0 {
		o.Resync = DefaultResync
	}
	if o.Count < 0 || o.Resync < 0 {
		return nil, fmt.Errorf("device plugin: count %d, resync %s: want > 0", o.Count, o.Resync)
	}
	if !filepath.IsAbs(o.Dir) {
		return nil, fmt.Errorf("device plugin: folder %q: want an absolute path", o.Dir)
	}
	m := &Manager{o: o, served: map[string]*served{}}
	for _, r := range o.Resources {
		if _, dup := m.served[r.Name]; dup || r.Socket == "" || r.Socket == kubeletSocketName || strings.Contains(r.Socket, "/") {
			return nil, fmt.Errorf("device plugin: resource %s: duplicate or bad socket name %q", r.Name, r.Socket)
		}
		m.served[r.Name] = &served{p: newPlugin(r, o.Count, false)}
	}
	return m, nil
}

// Resources are the names the Manager advertises, sorted.
func (m *Manager) Resources() []string {
	names := make([]string, 0, len(m.o.Resources))
	for _, r := range m.o.Resources {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// Check is a readiness check (healthz.Checker): nil once every resource is registered with the
// kubelet that is running now.
func (m *Manager) Check(*http.Request) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var missing []string
	for _, r := range m.o.Resources {
		if m.served[r.Name].kubelet == (fileID{}) {
			missing = append(missing, r.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("device plugin: %s not registered with the kubelet (%s)", strings.Join(missing, ", "), filepath.Join(m.o.Dir, kubeletSocketName))
	}
	return nil
}

// Start serves and registers every resource and keeps them registered until ctx ends, then
// stops the servers and removes their sockets. It implements manager.Runnable.
func (m *Manager) Start(ctx context.Context) error {
	if len(m.o.Resources) == 0 {
		m.o.Log.Info("device plugin: nothing to advertise")
		<-ctx.Done()
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("device plugin: watch: %w", err)
	}
	defer w.Close()
	defer m.stopAll()
	// The device nodes' folders, for health (devtmpfs reports creates and removes).
	for _, d := range m.deviceDirs() {
		if err := w.Add(d); err != nil {
			m.o.Log.Info("device plugin: device folder not watched (checked every resync)", "dir", d, "reason", err.Error())
		}
	}
	resync := time.NewTicker(m.o.Resync)
	defer resync.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := firstRetry
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("device plugin: watcher closed")
			}
			if !m.relevant(ev.Name) {
				continue
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("device plugin: watcher closed")
			}
			m.o.Log.Error(err, "device plugin: watch (checking now)")
		case <-resync.C:
		case <-retry.C:
		}
		if err := m.reconcile(ctx, w); err != nil {
			m.o.Log.Error(err, "device plugin: retrying", "in", backoff.String())
			retry.Reset(backoff)
			backoff = min(2*backoff, m.o.Resync)
			continue
		}
		backoff = firstRetry
	}
}

func (m *Manager) deviceDirs() []string {
	var dirs []string
	for _, r := range m.o.Resources {
		if d := filepath.Dir(r.Path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// relevant: an event on the kubelet's socket, one of ours, the folder itself or a device node.
func (m *Manager) relevant(name string) bool {
	if name == m.o.Dir || name == filepath.Join(m.o.Dir, kubeletSocketName) {
		return true
	}
	for _, r := range m.o.Resources {
		if name == r.Path || name == filepath.Join(m.o.Dir, r.Socket) {
			return true
		}
	}
	return false
}

// reconcile makes every resource served on its socket, registered with the current kubelet and
// of the health its device node has. Called from Start's goroutine only.
func (m *Manager) reconcile(ctx context.Context, w *fsnotify.Watcher) error {
	if err := os.MkdirAll(m.o.Dir, defaultDirMode); err != nil {
		return fmt.Errorf("device plugin folder: %w", err)
	}
	// Add is idempotent; it renews the watch after the folder was removed and made again.
	if err := w.Add(m.o.Dir); err != nil {
		return fmt.Errorf("device plugin: watch %s: %w", m.o.Dir, err)
	}
	kubelet, kerr := statID(filepath.Join(m.o.Dir, kubeletSocketName))
	var errs []error
	for _, r := range m.o.Resources {
		s := m.served[r.Name]
		if s.p.setHealthy(charDevice(r.Path)) {
			m.o.Log.Info("device plugin: device health changed", "resource", r.Name, "path", r.Path, "healthy", charDevice(r.Path))
		}
		path := filepath.Join(m.o.Dir, r.Socket)
		if id, err := statID(path); s.srv == nil || err != nil || id != s.socket {
			if s.srv != nil {
				m.o.Log.Info("device plugin: socket gone (kubelet restarted?): serving it again", "resource", r.Name, "socket", path)
			}
			if err := m.serve(s, path); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if kerr != nil {
			m.setRegistered(s, fileID{})
			errs = append(errs, fmt.Errorf("register %s: kubelet not running: %w", r.Name, kerr))
			continue
		}
		if s.kubelet == kubelet {
			continue
		}
		if err := register(ctx, filepath.Join(m.o.Dir, kubeletSocketName), r); err != nil {
			m.setRegistered(s, fileID{})
			errs = append(errs, err)
			continue
		}
		m.setRegistered(s, kubelet)
		m.o.Log.Info("device plugin: registered with the kubelet", "resource", r.Name, "devices", m.o.Count, "socket", path)
	}
	return errors.Join(errs...)
}

func (m *Manager) setRegistered(s *served, kubelet fileID) {
	m.mu.Lock()
	s.kubelet = kubelet
	m.mu.Unlock()
}

// serve (re)starts s's gRPC server on a fresh socket at path: the registration with the
// kubelet is to be made again.
func (m *Manager) serve(s *served, path string) error {
	if s.srv != nil {
		s.srv.Stop()
		s.srv = nil
	}
	m.setRegistered(s, fileID{})
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("serve %s: %w", s.p.res.Name, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("serve %s: %w", s.p.res.Name, err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		l.Close()
		return fmt.Errorf("serve %s: %w", s.p.res.Name, err)
	}
	id, err := statID(path)
	if err != nil {
		l.Close()
		return fmt.Errorf("serve %s: %w", s.p.res.Name, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s.p)
	go func() { _ = srv.Serve(l) }() // returns when Stop closes l
	s.srv, s.socket = srv, id
	return nil
}

func (m *Manager) stopAll() {
	for _, r := range m.o.Resources {
		s := m.served[r.Name]
		if s.srv == nil {
			continue
		}
		s.srv.Stop()
		s.srv = nil
		path := filepath.Join(m.o.Dir, r.Socket)
		// Remove only our own socket: a new agent may already serve at that path.
		if id, err := statID(path); err == nil && id == s.socket {
			_ = os.Remove(path)
		}
		m.setRegistered(s, fileID{})
	}
}

// register tells the kubelet at kubeletSocket about r's plugin (the Registration service's
// Register; the kubelet then dials r.Socket in its folder and calls ListAndWatch).
func register(ctx context.Context, kubeletSocket string, r Resource) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("register %s: %w", r.Name, err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: r.Socket, ResourceName: r.Name, Options: &pluginapi.DevicePluginOptions{},
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("register %s with %s: %w", r.Name, kubeletSocket, err)
	}
	return nil
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("stat %s: no inode", path)
	}
	return fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}, nil
}

// charDevice: path is a character device node (the device's health).
func charDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
