package realcluster

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

var testLayout = layout{Root: "/var/lib/rc-test", Run: "/run/rc-test"}

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

func TestCNIConflist(t *testing.T) {
	b, err := cniConflist(testLayout)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Plugins []struct {
			Type string
			IPAM struct {
				DataDir string
				Ranges  [][]struct{ Subnet, Gateway string }
			}
		}
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Plugins) != 2 || c.Plugins[0].Type != "bridge" || c.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins: %+v", c.Plugins)
	}
	ipam := c.Plugins[0].IPAM
	if ipam.DataDir != testLayout.cniIPAM() || ipam.Ranges[0][0].Subnet != PodSubnet.String() || ipam.Ranges[0][0].Gateway != Gateway.String() {
		t.Fatalf("ipam: %+v", ipam)
	}
}

func TestKubeletConfig(t *testing.T) {
	b, err := kubeletConfig(testLayout, "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": CgroupRoot,
		"containerRuntimeEndpoint": "unix:///run/rc-test/containerd.sock", "podLogsDir": "/var/lib/rc-test/pod-logs"} {
		if c[k] != want {
			t.Errorf("%s = %v, want %v", k, c[k], want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := mountinfo.Unescape(`/a\040b/c\011d`); got != "/a b/c\td" {
		t.Fatalf("got %q", got)
	}
}
