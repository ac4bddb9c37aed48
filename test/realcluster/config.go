package realcluster

import (
	"encoding/json"
	"fmt"
	"strings"
)

// containerdConfig is containerd's private config: its own root, state, socket and CNI folders,
// the cgroupfs driver (SystemdCgroup false) and vmlet's pause image as the sandbox image.
func containerdConfig(l layout) string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return strings.Join([]string{
		"version = 2",
		"root = " + q(l.ctrRoot()),
		"state = " + q(l.ctrState()),
		"[grpc]",
		"  address = " + q(l.ctrSocket()),
		"[ttrpc]",
		"  address = " + q(l.ctrSocket()+".ttrpc"),
		"[debug]",
		`  address = ""`,
		"[metrics]",
		`  address = ""`,
		`[plugins."io.containerd.internal.v1.opt"]`,
		"  path = " + q(l.Root+"/opt"),
		`[plugins."io.containerd.grpc.v1.cri"]`,
		"  sandbox_image = " + q(PauseImage),
		"  netns_mounts_under_state_dir = true",
		"  disable_apparmor = true",
		// No CAP_SYS_RESOURCE on these machines: a pod's oom_score_adj may not go below
		// containerd's own (runc fails "failed to update /proc/self/oom_score_adj" otherwise).
		"  restrict_oom_score_adj = true",
		"  enable_selinux = false",
		`  stream_server_address = "127.0.0.1"`,
		`  stream_server_port = "0"`,
		`[plugins."io.containerd.grpc.v1.cri".cni]`,
		`  bin_dir = "/usr/lib/cni"`,
		"  conf_dir = " + q(l.cniConf()),
		"  max_conf_num = 1",
		`[plugins."io.containerd.grpc.v1.cri".containerd]`,
		`  snapshotter = "overlayfs"`,
		`  default_runtime_name = "runc"`,
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
		`  runtime_type = "io.containerd.runc.v2"`,
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`,
		"  SystemdCgroup = false",
		"  Root = " + q(l.runcRoot()),
		`  BinaryName = "/usr/sbin/runc"`,
		"",
	}, "\n")
}

// cniConflist is the pod network: a bridge with host-local IPAM (state in the node's layout,
// addresses from the node's share of PodSubnet) and portmap for hostPorts. Every node's pods are
// on the one bridge.
func cniConflist(n Node) ([]byte, error) {
	l := n.l
	start, end := n.podRange()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "vmlet-cluster",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      BridgeName,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": l.cniIPAM(),
					"ranges": []any{[]any{map[string]any{
						"subnet":     PodSubnet.String(),
						"rangeStart": start.String(),
						"rangeEnd":   end.String(),
						"gateway":    Gateway.String(),
					}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
				"snat":         true,
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeletConfig is the KubeletConfiguration (JSON is YAML): cgroupfs driver under the node's
// cgroup root, failCgroupV1 false (cgroup-v1 hybrid host), the node's containerd and ports,
// x509 + webhook authentication, eviction thresholds low enough not to evict on a busy shared
// disk, and the node's taint.
func kubeletConfig(n Node, clientCA string) ([]byte, error) {
	l := n.l
	conf := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"failCgroupV1":                false,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  n.cgroupRoot(),
		"cgroupsPerQOS":               true,
		"containerRuntimeEndpoint":    "unix://" + l.ctrSocket(),
		"address":                     Gateway.String(),
		"port":                        n.kubeletPort(),
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 n.kubeletHealth(),
		"podLogsDir":                  l.podLogs(),
		"failSwapOn":                  false,
		"clusterDomain":               "cluster.local",
		"resolvConf":                  "/etc/resolv.conf",
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
		},
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": clientCA},
		},
		"authorization":             map[string]string{"mode": "Webhook"},
		"nodeStatusUpdateFrequency": "5s",
		"syncFrequency":             "10s",
		"fileCheckFrequency":        "10s",
		"shutdownGracePeriod":       "0s",
	}
	if n.Taint != "" {
		kv, effect, _ := strings.Cut(n.Taint, ":")
		k, v, _ := strings.Cut(kv, "=")
		conf["registerWithTaints"] = []any{map[string]string{"key": k, "value": v, "effect": effect}}
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeProxyConfig is the KubeProxyConfiguration of the machine's one kube-proxy (the nodes
// share the host's network namespace, so one proxy serves both): iptables mode, every Service
// connection masqueraded (pods on the one bridge answer each other directly otherwise, past the
// host's un-DNAT), no conntrack table resizing (no CAP_SYS_RESOURCE here), health on
// 127.0.0.1, metrics off.
func kubeProxyConfig(l layout, node string) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": l.userKubeconfig("kube-proxy")},
		"hostnameOverride":   node,
		"bindAddress":        Gateway.String(),
		"mode":               "iptables",
		"clusterCIDR":        PodSubnet.String(),
		"iptables":           map[string]any{"masqueradeAll": true},
		"conntrack":          map[string]any{"maxPerCore": 0},
		"healthzBindAddress": fmt.Sprintf("127.0.0.1:%d", proxyHealth),
		"metricsBindAddress": "",
	}
	return json.MarshalIndent(conf, "", "  ")
}
