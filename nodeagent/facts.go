package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/selinuxlabel"
)

// emulatorProbeTimeout bounds each run of the node's QEMU at startup (-machine help,
// --version).
const emulatorProbeTimeout = 10 * time.Second

// probeFacts is what the heartbeat publishes of this node: KVM and tun (devices.Probe), the
// host CPU's model name and, where the node has QEMU of its own, its version; and the versioned
// q35 type that QEMU runs for "q35" ("" without QEMU here: a cluster node, whose QEMU is in the
// launcher image; vmis then get the alias).
func probeFacts(ctx context.Context, log logr.Logger) (controllers.NodeFacts, string) {
	caps := devices.Probe()
	facts := controllers.NodeFacts{KVM: caps.KVM.KVMUsable(), AccelReason: caps.KVM.Reason, Tun: caps.Tun, Postcopy: caps.Userfaultfd,
		SELinux: selinuxlabel.Probe()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		facts.CPUModel = CPUModelName(b)
	}
	pctx, cancel := context.WithTimeout(ctx, emulatorProbeTimeout)
	defer cancel()
	machine, err := qemu.DefaultQ35Machine(pctx, "")
	if err != nil {
		log.Info("no versioned machine type: vmis get the q35 alias", "reason", err.Error())
		return facts, ""
	}
	if facts.QEMUVersion, err = qemu.Version(pctx, ""); err != nil {
		log.Info("no qemu version for the node's status", "reason", err.Error())
	}
	return facts, machine
}

// CPUModelName is the first "model name" of /proc/cpuinfo (x86; "" where it has none, as on
// arm64, whose cpuinfo names no model). Pure.
func CPUModelName(cpuinfo []byte) string {
	s := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
