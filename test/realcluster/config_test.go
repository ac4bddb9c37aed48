package realcluster

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

var (
	testLayout = layout{Root: "/var/lib/rc-test", Run: "/run/rc-test"}
	testNodes  = nodes(Options{NodeName: "n", Nodes: 2}, testLayout)
)

// Every path containerd is given lies in the layout: nothing it writes lands in the host's
// /var/lib/containerd, /run/containerd or /etc/cni.
func TestContainerdConfigPrivate(t *testing.T) {
	conf := containerdConfig(testLayout)
	for _, ln := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(ln, " = ")
		if !ok || !strings.HasPrefix(strings.TrimSpace(v), `"/`) {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if strings.TrimSpace(k) == "bin_dir" || strings.TrimSpace(k) == "BinaryName" {
			continue // read-only binaries
		}
		if !strings.HasPrefix(v, testLayout.Root+"/") && !strings.HasPrefix(v, testLayout.Run+"/") {
			t.Errorf("%s = %s is outside the layout", strings.TrimSpace(k), v)
		}
	}
	for _, want := range []string{`sandbox_image = "vmlet.dev/pause:dev"`, "SystemdCgroup = false",
		"netns_mounts_under_state_dir = true", "restrict_oom_score_adj = true", `bin_dir = "/usr/lib/cni"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("containerd config lacks %q", want)
		}
	}
}

// Both nodes' pods are on the one bridge and subnet, from ranges that do not overlap, with
// IPAM state of their own.
func TestCNIConflist(t *testing.T) {
	type rng struct{ Subnet, Gateway, RangeStart, RangeEnd string }
	var got []rng
	for _, n := range testNodes {
		b, err := cniConflist(n)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Plugins []struct {
				Type, Bridge string
				IPAM         struct {
					DataDir string
					Ranges  [][]rng
				}
			}
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Plugins) != 2 || c.Plugins[0].Type != "bridge" || c.Plugins[0].Bridge != BridgeName || c.Plugins[1].Type != "portmap" {
			t.Fatalf("plugins: %+v", c.Plugins)
		}
		ipam := c.Plugins[0].IPAM
		if ipam.DataDir != n.l.cniIPAM() || len(ipam.Ranges) != 1 || len(ipam.Ranges[0]) != 1 {
			t.Fatalf("node %s ipam: %+v", n.Name, ipam)
		}
		got = append(got, ipam.Ranges[0][0])
	}
	want := []rng{{PodSubnet.String(), Gateway.String(), "172.30.0.10", "172.30.0.129"},
		{PodSubnet.String(), Gateway.String(), "172.30.0.130", "172.30.0.249"}}
	if !slices.Equal(got, want) {
		t.Errorf("ranges %+v, want %+v", got, want)
	}
	if testNodes[0].l.cniIPAM() == testNodes[1].l.cniIPAM() {
		t.Errorf("the nodes share IPAM state %s", testNodes[0].l.cniIPAM())
	}
}

func TestKubeletConfig(t *testing.T) {
	wants := []map[string]any{
		{"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": CgroupRoot, "port": 10250.0, "healthzPort": 10248.0,
			"containerRuntimeEndpoint": "unix:///run/rc-test/containerd.sock", "podLogsDir": "/var/lib/rc-test/pod-logs",
			"registerWithTaints": nil},
		{"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": CgroupRoot + "/n-2", "port": 10260.0, "healthzPort": 10258.0,
			"containerRuntimeEndpoint": "unix:///run/rc-test/nodes/n-2/containerd.sock", "podLogsDir": "/var/lib/rc-test/nodes/n-2/pod-logs",
			"registerWithTaints": []any{map[string]any{"key": SecondaryNodeTaintKey, "value": "n-2", "effect": "NoSchedule"}}},
	}
	for i, n := range testNodes {
		b, err := kubeletConfig(n, "/ca.crt")
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		for k, want := range wants[i] {
			if !reflect.DeepEqual(c[k], want) {
				t.Errorf("node %s: %s = %v, want %v", n.Name, k, c[k], want)
			}
		}
	}
}

// The second node's pods see its own folders for PrivateHostPaths (through /var/run too) and
// the machine's for anything else; the first node's are the machine's.
func TestNodeHostPath(t *testing.T) {
	n1, n2 := testNodes[0], testNodes[1]
	for _, c := range []struct {
		n          Node
		path, want string
	}{
		{n1, "/var/lib/vmlet/volumes", "/var/lib/vmlet/volumes"},
		{n2, "/var/lib/vmlet/volumes", "/var/lib/rc-test/n2/var/lib/vmlet/volumes"},
		{n2, "/var/lib/vmlet", "/var/lib/rc-test/n2/var/lib/vmlet"},
		{n2, "/var/lib/vmletx", "/var/lib/vmletx"},
		{n2, "/var/run/vmlet/launchers", "/var/lib/rc-test/n2/run/vmlet/launchers"},
		{n2, DevicePluginDir, "/var/lib/rc-test/n2" + DevicePluginDir},
		{n2, "/dev/kvm", "/dev/kvm"},
	} {
		if got := c.n.HostPath(c.path); got != c.want {
			t.Errorf("%s HostPath(%s) = %s, want %s", c.n.Name, c.path, got, c.want)
		}
	}
	if n2.Name != "n-2" || n1.Taint != "" || n2.Taint != SecondaryNodeTaintKey+"=n-2:NoSchedule" {
		t.Errorf("nodes %+v", testNodes)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := mountinfo.Unescape(`/a\040b/c\011d`); got != "/a b/c\td" {
		t.Fatalf("got %q", got)
	}
}
