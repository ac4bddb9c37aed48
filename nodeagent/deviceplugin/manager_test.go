package deviceplugin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vmlet/vmlet/nodeagent/deviceplugin"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// fakeKubelet stands in for the kubelet's Registration service (a unit test of that seam only;
// TestDevicePluginRealKubelet in test/realcluster is the real one): on Register it dials the
// plugin's endpoint, as the kubelet does, and keeps the last device list ListAndWatch sent.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	srv *grpc.Server

	mu      sync.Mutex
	regs    map[string]int                 // Register calls per resource
	devices map[string][]*pluginapi.Device // last list per resource
	clients map[string]pluginapi.DevicePluginClient
}

func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{dir: dir, regs: map[string]int{}, devices: map[string][]*pluginapi.Device{},
		clients: map[string]pluginapi.DevicePluginClient{}}
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	return k
}

// restart is what a kubelet restart does to the folder: the old kubelet is gone, the new one
// deletes every socket in it (the plugins' too) and listens on a new kubelet.sock.
func (k *fakeKubelet) restart(t *testing.T) *fakeKubelet {
	t.Helper()
	k.srv.Stop()
	ents, err := os.ReadDir(k.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return startFakeKubelet(t, k.dir)
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("version %q", r.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := pluginapi.NewDevicePluginClient(conn)
	k.mu.Lock()
	k.regs[r.ResourceName]++
	k.clients[r.ResourceName] = c
	k.mu.Unlock()
	go func() {
		defer conn.Close()
		s, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
		if err != nil {
			return
		}
		for {
			resp, err := s.Recv()
			if err != nil {
				return
			}
			k.mu.Lock()
			k.devices[r.ResourceName] = resp.Devices
			k.mu.Unlock()
		}
	}()
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) state(name string) (regs, n int, health string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ds := k.devices[name]
	health = "none"
	for i, d := range ds {
		if i == 0 {
			health = d.Health
		} else if d.Health != health {
			health = "mixed"
		}
	}
	return k.regs[name], len(ds), health
}

func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dp") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func startManager(t *testing.T, o deviceplugin.Options) (*deviceplugin.Manager, func()) {
	t.Helper()
	o.Log = testr.New(t)
	m, err := deviceplugin.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	return m, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Start did not return within 30s of its context's end")
		}
	}
}

// TestManagerRegisters: the plugin registers every resource, the kubelet's ListAndWatch sees
// Count healthy devices and Allocate hands out the node; after a kubelet restart (its sockets,
// ours included, deleted) every resource registers again; stopping removes our sockets.
func TestManagerRegisters(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, dir)
	null := deviceplugin.Resource{Name: "test.vmlet.dev/null", Path: "/dev/null", Socket: "vmlet-null.sock"}
	gone := deviceplugin.Resource{Name: "test.vmlet.dev/gone", Path: filepath.Join(dir, "no-such-device"), Socket: "vmlet-gone.sock"}
	m, stop := startManager(t, deviceplugin.Options{Dir: dir, Count: 50, Resources: []deviceplugin.Resource{null, gone}})

	want := func(k *fakeKubelet, regs int) {
		t.Helper()
		for r, health := range map[string]string{null.Name: pluginapi.Healthy, gone.Name: pluginapi.Unhealthy} {
			poll.Until(t, 30*time.Second, r+" registered and listed", func() (bool, string) {
				g, n, h := k.state(r)
				return g == regs && n == 50 && h == health, fmt.Sprintf("%d registrations, %d devices, health %s", g, n, h)
			})
		}
		poll.Until(t, 10*time.Second, "ready", func() (bool, string) {
			err := m.Check(nil)
			return err == nil, fmt.Sprint(err)
		})
	}
	want(k, 1)
	k.mu.Lock()
	c := k.clients[null.Name]
	k.mu.Unlock()
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"3"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.ContainerResponses[0].Devices; len(d) != 1 || d[0].HostPath != "/dev/null" || d[0].ContainerPath != "/dev/null" || d[0].Permissions != "rw" {
		t.Errorf("Allocate: %v", d)
	}

	t0 := time.Now()
	k = k.restart(t)
	want(k, 1) // the new kubelet's first registrations
	t.Logf("re-registered %d resources %s after the kubelet restart", len(m.Resources()), time.Since(t0).Round(time.Millisecond))

	stop()
	for _, r := range []deviceplugin.Resource{null, gone} {
		if _, err := os.Stat(filepath.Join(dir, r.Socket)); !os.IsNotExist(err) {
			t.Errorf("%s socket after stop: %v", r.Name, err)
		}
	}
	if err := m.Check(nil); err == nil {
		t.Error("Check after stop: nil, want not registered")
	}
}

// TestManagerWaitsForKubelet: started before the kubelet, the plugin is not ready and registers
// once kubelet.sock appears.
func TestManagerWaitsForKubelet(t *testing.T) {
	dir := shortDir(t)
	null := deviceplugin.Resource{Name: "test.vmlet.dev/null", Path: "/dev/null", Socket: "vmlet-null.sock"}
	m, stop := startManager(t, deviceplugin.Options{Dir: dir, Count: 2, Resources: []deviceplugin.Resource{null}})
	defer stop()
	poll.Until(t, 10*time.Second, "plugin socket", func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, null.Socket))
		return err == nil, fmt.Sprint(err)
	})
	if err := m.Check(nil); err == nil {
		t.Fatal("Check without a kubelet: nil, want not registered")
	}
	k := startFakeKubelet(t, dir)
	poll.Until(t, 30*time.Second, "registered", func() (bool, string) {
		g, n, h := k.state(null.Name)
		return g == 1 && n == 2 && h == pluginapi.Healthy && m.Check(nil) == nil, fmt.Sprintf("%d registrations, %d devices, %s", g, n, h)
	})
}

// TestManagerHealth: a device node that disappears turns its devices Unhealthy on the
// kubelet's ListAndWatch, and Healthy again when it is back (mknod: root).
func TestManagerHealth(t *testing.T) {
	prereq.Root(t)
	dir := shortDir(t)
	devDir := filepath.Join(dir, "dev")
	if err := os.Mkdir(devDir, 0o755); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(devDir, "null")
	mknod := func() {
		t.Helper()
		if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	mknod()
	k := startFakeKubelet(t, dir)
	r := deviceplugin.Resource{Name: "test.vmlet.dev/null", Path: node, Socket: "vmlet-null.sock"}
	// A long resync: the changes must come from the inotify watch.
	_, stop := startManager(t, deviceplugin.Options{Dir: dir, Count: 3, Resources: []deviceplugin.Resource{r}, Resync: time.Hour})
	defer stop()
	health := func(want string) {
		t.Helper()
		poll.Until(t, 10*time.Second, "health "+want, func() (bool, string) {
			_, n, h := k.state(r.Name)
			return n == 3 && h == want, fmt.Sprintf("%d devices, %s", n, h)
		})
	}
	health(pluginapi.Healthy)
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	health(pluginapi.Unhealthy)
	mknod()
	health(pluginapi.Healthy)
}
