// Package local is vmlet's single-machine mode (`vmlet local`, what `make run` starts): an
// embedded control plane (etcd + kube-apiserver processes from the project's cached binaries,
// with etcd's data persisted in a state folder), vmlet's CRDs installed, a kubeconfig written and
// a Node registered for this machine, so that the node agent and cluster controller can run
// against it with no kubelet.
//
// The control-plane processes are managed with controller-runtime's envtest process manager:
// the same, well-tested code that the test suites use to run a real API server. Certificates are
// regenerated on every start and the kubeconfig is rewritten; etcd's data survives restarts, so a
// second `make run` picks up the same objects.
//
// Lifecycle:
//   - One instance per state folder: it is flock'ed for the control plane's lifetime; a second
//     `vmlet local` fails at once with ErrStateDirInUse.
//   - etcd and kube-apiserver run through a `setpriv --pdeathsig` wrapper (TERM for etcd, KILL
//     for the stateless kube-apiserver), forked from an
//     OS thread that lives as long as the control plane, so they die with the vmlet that
//     started them (kill -9 included). They are also recorded (pid, start time, executable) in
//     StateDir/controlplane.json; a start finds processes a previous instance recorded and left
//     running, checks they are those processes, stops them (SIGTERM, grace, SIGKILL), waits for
//     etcd's data to be unlocked and starts fresh. A process it did not record is never
//     stopped: an etcd holding the data that way fails the start with ErrDataDirLocked.
//   - Stack.Shutdown (Ctrl-C) is a graceful node shutdown: VMIs end Failed, reason NodeShutdown
//     (controllers.VMIReconciler.ShutdownNode); Stack.Leave (--keep-vms) leaves the VMs running
//     for the next start to adopt, as after a crash.
//   - vmlet owns the local Node's Ready condition (VmletReady; Ready=False NodeShutdown or
//     VmletStopped when it stops), as a kubelet does: nothing else would write it here.
//
// Several nodes (Config.Nodes > 1, `vmlet local --nodes N`, what live migration needs on one
// machine): nodes NodeName-1 … NodeName-N, each a node agent with a controller-runtime manager
// of its own (as if each were its own process: the nodes' controllers share names, so name
// validation is off), its own Node, run root (RunRoot/NODE), cgroup parent (CgroupParent/NODE),
// storage (StateDir/nodes/NODE/{images,volumes}) and pod netns folder (DefaultPodNetnsRoot/NODE
// unless Network.NetnsDir is set), so two nodes can hold a pod netns for the same VMI at once.
// Their pod networks live in node namespaces on a node fabric (network.EnsureFabric: routed pod
// subnets, no NAT between nodes, its uplink veth in Network.NetnsPath, the host's by default,
// masquerading what leaves the fabric), and they share one multus network, vmlet-shared (a
// network.Segment in the fabric namespace), whose interfaces keep their address on every node
// and so migrate. The first node's manager runs the scheduler, which
// places VMIs across the nodes (controllers.PickNode); only the first node's runtime moves
// vmlet into its system CPU group. Shutdown removes the fabric after the last node's pods;
// Leave (--keep-vms) keeps it, and the next start adopts it (EnsureFabric is idempotent), as it
// does after a crash. A start that fails after creating the fabric leaves it for the next start.
// VMIs placed on a node that a later start with fewer nodes does not run stay where they are.
//
// The node agent itself is package nodeagent's, the same one `vmlet agent` runs; local mode adds
// the control plane and a scheduler that places every VMI on this machine (on one of its nodes).
package local
