package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
)

// Shutdown is a graceful node shutdown, as the kubelet's, of every node: the node agents stop
// reconciling, every guest is shut down within its grace period (in parallel, all nodes at
// once), each VMI ends Failed with reason NodeShutdown (a Warning Event; a VMI is one run and
// must be created again) and its launcher, cgroup, netns and volumes go; then each Node is
// marked Ready=False (NodeShutdown), the node networks are removed (with several nodes the
// fabric too) and the control plane stopped. VMIs stay in etcd.
func (s *Stack) Shutdown(ctx context.Context) error {
	errs := make([]error, len(s.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.Nodes {
		if n.Agent == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Agent.Reconciler.ShutdownNode(ctx); err != nil {
				errs[i] = fmt.Errorf("shut node %s down: %w", n.Name, err)
			}
		}()
	}
	wg.Wait()
	errs = append(errs, s.stopManagers())
	for _, n := range s.Nodes {
		if n.Agent == nil {
			continue
		}
		errs = append(errs, n.Agent.Heartbeat.SetNotReady(ctx, string(vmistatus.ReasonNodeShutdown),
			"vmlet local shut the node down: its VMIs ended Failed (NodeShutdown)"))
		errs = append(errs, nodeagent.CloseNetwork(n.Agent.Reconciler.Network))
	}
	if s.cfg.multi() {
		errs = append(errs, s.removeFabric())
	}
	errs = append(errs, s.CP.Stop())
	errs = append(errs, s.removeNodeDirs())
	return errors.Join(errs...)
}

// removeNodeDirs removes what the nodes' process runtimes made for each node as a whole once
// its VMs and the control plane are gone: the CPU groups (system, launchers, the node's; vmlet
// first leaves the system group it joined), the launchers' cgroup parent and the run root,
// and with several nodes their common parents. Each goes only if empty: a VM that could not be
// cleaned up keeps its folders, and the error names them. The node agent (`vmlet agent`)
// keeps its own, as the kubelet keeps kubepods; `--keep-vms` (Leave) keeps everything.
// Equivalent to: echo $$ > <cpu mount>/cgroup.procs; rmdir <cpu root>/{system,launchers}
// <cpu root> <cgroup parent> <run root>
func (s *Stack) removeNodeDirs() error {
	var errs []error
	var parents []string
	for _, n := range s.Nodes {
		rt := n.Runtime
		if rt == nil {
			continue
		}
		if h := rt.CPU; h != nil {
			if n.spec.joinSystem {
				errs = append(errs, h.LeaveSystem(os.Getpid()))
			}
			errs = append(errs, h.Teardown())
			parents = append(parents, filepath.Dir(h.Root))
		}
		for _, d := range []string{rt.CgroupParent, rt.RunRoot} {
			errs = append(errs, removeEmpty(d))
			parents = append(parents, filepath.Dir(d))
		}
	}
	if s.cfg.multi() { // the nodes' folders live in the configured ones
		for _, d := range slices.Compact(slices.Sorted(slices.Values(parents))) {
			errs = append(errs, removeEmpty(d))
		}
	}
	return errors.Join(errs...)
}

// removeEmpty removes folder dir if it is empty (rmdir; a cgroup with no children and no
// processes counts as empty), and says what is left in it if not.
func removeEmpty(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s left: not empty: %w", dir, err)
	}
	return fmt.Errorf("remove %s: %w", dir, err)
}

// removeFabric removes the node fabric and the nodes' (now empty) pod netns folders, and
// their parent when it is vmlet's own (DefaultPodNetnsRoot, no --netns-dir given).
func (s *Stack) removeFabric() error {
	err := network.RemoveFabric(s.cfg.fabricConfig())
	for _, n := range s.Nodes {
		_ = os.Remove(n.spec.network.NetnsDir) // only if empty: a pod netns left stays visible
	}
	if s.cfg.Network.NetnsDir == "" {
		_ = os.Remove(DefaultPodNetnsRoot)
	}
	return err
}

// Leave stops vmlet and the control plane and leaves the VMs running (`--keep-vms`): launchers,
// QEMU, their cgroups and networks (the fabric included) stay and the VMIs are not touched; each
// Node is marked Ready=False (VmletStopped). The next start adopts the launchers, as after a
// crash.
func (s *Stack) Leave(ctx context.Context) error {
	var errs []error
	for _, n := range s.Nodes {
		if n.Agent != nil {
			n.Agent.Reconciler.Drain()
		}
	}
	errs = append(errs, s.stopManagers())
	for _, n := range s.Nodes {
		if n.Agent == nil {
			continue
		}
		errs = append(errs, n.Agent.Heartbeat.SetNotReady(ctx, controllers.ReasonVmletStopped,
			"vmlet local stopped and left its VMs running; the next start manages them again"))
		errs = append(errs, n.Agent.Close()) // the launchers keep serving their guests' DHCP
	}
	errs = append(errs, s.CP.Stop())
	return errors.Join(errs...)
}

// stopManagers stops the nodes' managers (those started) and waits for them.
func (s *Stack) stopManagers() error {
	var errs []error
	for _, n := range s.Nodes {
		if n.cancel == nil {
			continue
		}
		n.cancel()
		n.cancel = nil
		if err := <-n.mgrDone; err != nil {
			errs = append(errs, fmt.Errorf("manager of node %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}
