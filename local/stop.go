package local

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/nodeagent"
)

// Shutdown is a graceful node shutdown, as the kubelet's: the node agent stops reconciling, every
// guest is shut down within its grace period (in parallel), each VMI of this node ends Failed
// with reason NodeShutdown (a Warning Event; a VMI is one run and must be created again) and
// its launcher, cgroup, netns and volumes go; then the Node is marked Ready=False
// (NodeShutdown), the node network removed and the control plane stopped. VMIs stay in etcd.
func (s *Stack) Shutdown(ctx context.Context) error {
	var errs []error
	if s.Agent != nil {
		if err := s.Agent.Reconciler.ShutdownNode(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shut the node down: %w", err))
		}
	}
	errs = append(errs, s.stopManager())
	if s.Agent != nil {
		errs = append(errs, s.Agent.Heartbeat.SetNotReady(ctx, string(vmistatus.ReasonNodeShutdown),
			"vmlet local shut the node down: its VMIs ended Failed (NodeShutdown)"))
		errs = append(errs, nodeagent.CloseNetwork(s.Agent.Reconciler.Network))
	}
	errs = append(errs, s.CP.Stop())
	return errors.Join(errs...)
}

// Leave stops vmlet and the control plane and leaves the VMs running (`--keep-vms`): launchers,
// QEMU, their cgroups and networks stay and the VMIs are not touched; the Node is marked
// Ready=False (VmletStopped). The next start adopts the launchers, as after a crash.
func (s *Stack) Leave(ctx context.Context) error {
	var errs []error
	if s.Agent != nil {
		s.Agent.Reconciler.Drain()
	}
	errs = append(errs, s.stopManager())
	if s.Agent != nil {
		errs = append(errs, s.Agent.Heartbeat.SetNotReady(ctx, controllers.ReasonVmletStopped,
			"vmlet local stopped and left its VMs running; the next start manages them again"))
		errs = append(errs, s.Agent.Close()) // the launchers keep serving their guests' DHCP
	}
	errs = append(errs, s.CP.Stop())
	return errors.Join(errs...)
}

func (s *Stack) stopManager() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	if err := <-s.mgrDone; err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}
