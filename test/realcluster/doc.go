// Package realcluster brings up a real Kubernetes of one or two nodes on this machine and tears
// it down leaving nothing: containerd 1.6 + runc (Debian packages), the CNI bridge plugin
// (containernetworking-plugins in /usr/lib/cni), etcd and kube-apiserver (started the way
// test/apienv starts them, through envtest's control plane), kube-controller-manager,
// kube-scheduler, kube-proxy and a kubelet per node (built by test/assets/controlplane/build.sh).
//
// One cluster at a time. The daemons use fixed names (the bridge, iptables chains, kubelet
// ports 10250/10248, the /var/log/containers links kubelet always writes), so Start takes an
// exclusive flock on /run/vmlet-realcluster.lock and waits for it (until ctx ends) when another
// cluster runs. The daemons inherit the lock's file description, so the lock stays held while any
// of them lives (a detached `vmlet-cluster up` cluster holds it after the command exited), and
// is free again when they are all gone, crashed or stopped. Start then first removes whatever a
// crashed run left behind (the same teardown as Stop), so a killed test never blocks the next.
// A test's cluster (Start) dies with the test (parent-death signal on the daemons); Up (`make
// cluster-up`) starts the daemons detached and marks the cluster so: a second Up keeps it when
// it is healthy, Down stops only such a cluster (or a crashed one's leftovers, under the lock)
// and refuses a running test's cluster with ErrBusy.
//
// Layout (Options.Root, default /var/lib/vmlet-cluster; Options.RunDir, default
// /run/vmlet-cluster): etcd/, apiserver/ (certificates, service-account key), pki/ (the CAs),
// containerd/ (root) and run/containerd (state, socket, pod netns: netns_mounts_under_state_dir),
// cni/net.d (the conflist) and cni/ipam (host-local state), kubelet/ (--root-dir), pod-logs/
// (podLogsDir), logs/ (each daemon's log) and kubeconfig (admin, system:masters). Outside it, by
// necessity: the kubelet's device-plugin folder is /var/lib/kubelet/device-plugins whatever
// --root-dir says (DevicePluginDir; the standard path, so device plugins need no setting),
// containerd 1.6 puts shim sockets in /run/containerd/s and libcni caches results in
// /var/lib/cni/results; Stop removes the cluster's entries there.
//
// Two nodes (Options.Nodes 2): the second has a kubelet and a containerd of its own (layout
// Root/nodes/<name> and RunDir/nodes/<name>, kubelet ports 10260/10258, cgroup root
// CgroupRoot/<name>, pod addresses 172.30.0.130–249 on the same bridge; the first keeps
// 172.30.0.10–129). Both of its daemons run in a mount namespace of their own (unshare, a slave
// of the host's: the host's later mounts show in it, its own never leave it; nsenter for the
// kubelet) where PrivateHostPaths are bind mounts of Root/n2/<path>: the kubelet's device-plugin
// folder, which the kubelet hard-codes, and vmlet's node folders, so that one DaemonSet runs an
// agent with its own state on each node. Node.HostPath says where a node's hostPath is on this
// machine. The node registers with the NoSchedule taint SecondaryNodeTaintKey, so that only pods
// that tolerate it land there. Teardown needs nothing more: its daemons carry the layout in their
// command lines, its cgroups are below CgroupRoot, its mounts die with its namespace.
//
// Cgroups: the kubelet uses the cgroupfs driver (this host has no systemd) with cgroupRoot
// /vmlet-cluster, so kubepods lives at /sys/fs/cgroup/<controller>/vmlet-cluster/kubepods/...
// in every cgroup-v1 controller and in the unified (v2) hierarchy of this hybrid host;
// failCgroupV1 is false because the host is cgroup-v1 hybrid. runc keeps its state in
// run/runc. containerd runs with restrict_oom_score_adj: these machines give root no
// CAP_SYS_RESOURCE, so the kubelet's oom_score_adj of -998 for sandboxes would make runc fail
// ("failed to update /proc/self/oom_score_adj: Permission denied"); pods get containerd's.
//
// Network: the pod network is the CNI bridge vmletrc0 with 172.30.0.1/24 (host-local IPAM,
// pods from 172.30.0.10; ipMasq and portmap, so CNI-* chains appear in iptables), chosen away from
// the 10.x and 198.19.x ranges the repo's tests use. containerd's CRI brings up each pod's
// loopback itself (the loopback plugin from the same bin_dir), so the conflist holds bridge and
// portmap. Services use 172.30.128.0/24, routed by one kube-proxy for the machine (iptables
// mode, masquerading every Service connection: pods on the one bridge answer each other
// directly otherwise; both nodes share the host's network namespace, so one proxy serves both);
// `kubernetes` (172.30.128.1:443) is also DNATed to the API server by the chain VMLET-RC-SVC in
// the nat table (PREROUTING and OUTPUT) from the start, before kube-proxy runs. The API server
// has the aggregation layer's front proxy (subresources.FrontProxyFlags). The API server
// listens on the bridge address (reachable from pods and the host, not from other machines),
// and the node's InternalIP is that address too.
//
// Certificates: package pki makes the serving CA and the API server certificate (SANs: the
// bridge address, 127.0.0.1 and the kubernetes Service IP) and the CA the kubelet trusts for
// the API server's kubelet client certificate; envtest's client CA signs the users (admin,
// system:kube-controller-manager, system:kube-scheduler, system:node:<name> in system:nodes).
//
// Stop (and Start's stale cleanup) leaves nothing: every process whose command line names the
// layout (daemons, shims) and every process in the kubepods cgroups is killed; mounts under the
// layout are unmounted (kubelet's pod volumes, containerd's overlay and shm mounts, netns);
// KUBE-* and CNI-* and VMLET-RC-* chains and the rules jumping to them are deleted (iptables and
// ip6tables, filter/nat/mangle); the cgroups are removed in every hierarchy; the bridge and the
// veths go; the folders, kubelet's /var/log/containers links and libcni's cached results
// (/var/lib/cni/results/vmlet-cluster-*, a folder containerd 1.6 does not let us move) are
// removed. The lock file itself stays (an unlocked empty file). The bridge plugin turns on
// net.ipv4.ip_forward, which is left on. Residue lists what
// is left of each kind, so callers can assert it is nothing.
package realcluster
