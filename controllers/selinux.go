package controllers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/selinuxlabel"
	"github.com/vmlet/vmlet/storage"
)

// SELinuxRelabel says when the agent labels what each launcher may touch.
type SELinuxRelabel string

// Relabel modes (the agent's --selinux-relabel).
const (
	// RelabelAuto labels where the node's SELinux is enabled (the default).
	RelabelAuto SELinuxRelabel = "auto"
	// RelabelAlways labels the files also where SELinux is disabled (the xattrs are written
	// and read back; no process label is ever set there): to test the labelling on a host
	// without SELinux, or to prepare files for a later enforcing boot.
	RelabelAlways SELinuxRelabel = "always"
	// RelabelNever labels nothing (the launchers must then run unconfined, e.g. spc_t).
	RelabelNever SELinuxRelabel = "never"
)

// ParseRelabel reads --selinux-relabel ("" is auto).
func ParseRelabel(s string) (SELinuxRelabel, error) {
	switch m := SELinuxRelabel(s); m {
	case "":
		return RelabelAuto, nil
	case RelabelAuto, RelabelAlways, RelabelNever:
		return m, nil
	}
	return "", fmt.Errorf("--selinux-relabel %q: want auto, always or never", s)
}

// SELinuxNone is status.selinuxContext where nothing was labelled on a node without SELinux
// (KubeVirt's word).
const SELinuxNone = "none"

// labelJournal is the file, in the VMI's storage folder, recording the labels the agent wrote
// and what they replaced.
const labelJournal = ".vmlet-selinux.json"

// NodeSELinux is the node's SELinux and the agent's labelling settings.
type NodeSELinux struct {
	State   selinuxlabel.State
	Relabel SELinuxRelabel
	// ProcessType is the type of launchers this agent starts itself (local mode; "" is
	// container_t). Cluster mode's launcher pods get theirs from the pod's seLinuxOptions.
	ProcessType string
	// Files are the file types (defaults container_file_t, container_ro_file_t).
	Files selinuxlabel.Options
}

// Labels reports whether the agent writes file labels on this node.
func (s *NodeSELinux) Labels() bool {
	return s != nil && (s.Relabel == RelabelAlways || (s.Relabel != RelabelNever && s.State.Enabled))
}

// LogState says, once at startup, what the node's SELinux is and what the agent labels.
func (s *NodeSELinux) LogState(log logr.Logger) {
	switch {
	case s == nil:
	case !s.State.Enabled && s.Labels():
		log.Info("SELinux is disabled on this node: launchers start without a process label, but VMI files are labelled (--selinux-relabel=always)")
	case !s.State.Enabled:
		log.Info("SELinux is disabled on this node: no labels are written and launchers start without a process label (status.selinuxContext: none)")
	case !s.Labels():
		log.Info("SELinux is enabled but --selinux-relabel=never: VMI files keep their labels; a confined launcher may be denied them", "mode", s.State.Mode)
	case !s.State.Enforcing():
		log.Info("SELinux is permissive on this node: labels are written, denials are only logged", "policy", s.State.PolicyType)
	default:
		log.Info("SELinux is enforcing: launchers get a process label and VMI files are labelled at its level", "policy", s.State.PolicyType)
	}
}

// computedLevel is the MCS level the agent gives the vmi's launcher where it chooses one: a
// migration target takes the source's (status.selinuxContext) unless the migration's
// configuration says matchSELinuxLevelOnMigration: false, which gives it one of its own; any
// other vmi keeps the level in its status, else gets selinuxlabel.LevelFor(uid).
func computedLevel(vmi *vmletv1.VirtualMachineInstance, target bool) string {
	src, srcErr := selinuxlabel.ParseContext(vmi.Status.SelinuxContext)
	if srcErr == nil {
		srcErr = selinuxlabel.CheckLevel(src.Level) // a VM's level, not a range
	}
	if target {
		ms := vmi.Status.MigrationState
		match := ms.MigrationConfiguration == nil || ms.MigrationConfiguration.MatchSELinuxLevelOnMigration == nil ||
			*ms.MigrationConfiguration.MatchSELinuxLevelOnMigration
		if match && srcErr == nil {
			return src.Level
		}
		if !match {
			return selinuxlabel.LevelFor(string(vmi.UID)+"/"+string(ms.MigrationUID), map[string]bool{src.Level: srcErr == nil})
		}
	}
	if srcErr == nil {
		return src.Level
	}
	return selinuxlabel.LevelFor(string(vmi.UID), nil)
}

// launcherContext is the context the vmi's launcher on this node runs as: read from the
// process where SELinux is enabled (pid > 0); else the level of the labels this node's agent
// wrote for it (the journal); else the computed one.
func (r *VMIReconciler) launcherContext(vmi *vmletv1.VirtualMachineInstance, pid int) (selinuxlabel.Context, error) {
	if r.SELinux.State.Enabled && pid > 0 {
		return selinuxlabel.ProcessLabel(pid)
	}
	entries, err := selinuxlabel.ReadJournal(filepath.Join(r.volumeDir(vmi.UID), labelJournal))
	if err != nil {
		return selinuxlabel.Context{}, err
	}
	for _, e := range entries {
		if e.Kind != selinuxlabel.Shared {
			c, err := selinuxlabel.ParseContext(e.Context)
			if err != nil {
				return selinuxlabel.Context{}, fmt.Errorf("label journal: %w", err)
			}
			return selinuxlabel.LauncherContext(r.SELinux.ProcessType, c.Level), nil
		}
	}
	return selinuxlabel.LauncherContext(r.SELinux.ProcessType, computedLevel(vmi, roleOf(vmi, r.NodeName) == roleTarget)), nil
}

// launcherLabels are what a launcher this agent starts gets (process.Spec): its process label
// where SELinux is enabled (never asked of a disabled kernel) and its run folder's file label
// where the agent labels. Empty strings: none.
func (r *VMIReconciler) launcherLabels(vmi *vmletv1.VirtualMachineInstance) (process, dir string) {
	if !r.SELinux.Labels() {
		return "", ""
	}
	c := selinuxlabel.LauncherContext(r.SELinux.ProcessType, computedLevel(vmi, roleOf(vmi, r.NodeName) == roleTarget))
	pl, err := selinuxlabel.Plan(c, selinuxlabel.Files{Private: []string{r.Runtime.Dir(string(vmi.UID))}}, r.SELinux.Files)
	if err != nil || len(pl) != 1 {
		return "", ""
	}
	if r.SELinux.State.Enabled {
		process = c.String()
	}
	return process, pl[0].Context
}

// labelFiles labels what the vmi's launcher opens on this node (storage plan's files, the
// run folder and what is in it) at its launcher's level and records the context in
// status.selinuxContext; "none" there where nothing is labelled on a node without SELinux.
// Idempotent: each pass may call it.
func (r *VMIReconciler) labelFiles(vmi *vmletv1.VirtualMachineInstance, plan *storage.VMPlan, res *storage.Result, pid int) error {
	if !r.SELinux.Labels() || r.Storage.Root == "" {
		if r.SELinux == nil || !r.SELinux.State.Enabled {
			vmi.Status.SelinuxContext = SELinuxNone
		}
		return nil
	}
	c, err := r.launcherContext(vmi, pid)
	if err != nil {
		return err
	}
	fs := storage.FilesOf(plan, res)
	files := selinuxlabel.Files{Private: fs.Private, Shared: fs.Shared, Host: fs.Host}
	run := r.Runtime.Dir(string(vmi.UID))
	files.Private = append(files.Private, run)
	ents, err := os.ReadDir(run)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("label run folder: %w", err)
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 { // the launcher's sockets, log and pid file
			files.Private = append(files.Private, filepath.Join(run, e.Name()))
		}
	}
	if err := r.applyLabels(vmi, c, files); err != nil {
		return err
	}
	vmi.Status.SelinuxContext = c.String()
	return nil
}

// labelHotplug labels a hotplugged volume's files before QEMU opens them.
func (r *VMIReconciler) labelHotplug(vmi *vmletv1.VirtualMachineInstance, plan *storage.VMPlan, res *storage.Result, pid int) error {
	if !r.SELinux.Labels() || r.Storage.Root == "" {
		return nil
	}
	c, err := r.launcherContext(vmi, pid)
	if err != nil {
		return err
	}
	fs := storage.FilesOf(plan, res)
	return r.applyLabels(vmi, c, selinuxlabel.Files{Private: fs.Private, Shared: fs.Shared, Host: fs.Host})
}

func (r *VMIReconciler) applyLabels(vmi *vmletv1.VirtualMachineInstance, c selinuxlabel.Context, files selinuxlabel.Files) error {
	labels, err := selinuxlabel.Plan(c, files, r.SELinux.Files)
	if err != nil {
		return err
	}
	return selinuxlabel.Apply(filepath.Join(r.volumeDir(vmi.UID), labelJournal), labels)
}

// restoreLabels gives the host files this agent labelled for the vmi their previous labels
// back (the vmi's folders go next, with their labels). Not after the vmi migrated away: its
// host files (shared volumes) are the target's now.
func (r *VMIReconciler) restoreLabels(vmi *vmletv1.VirtualMachineInstance) error {
	if r.Storage.Root == "" || (vmi.Status.NodeName != "" && vmi.Status.NodeName != r.NodeName) {
		return nil
	}
	if err := selinuxlabel.RestoreJournal(filepath.Join(r.volumeDir(vmi.UID), labelJournal)); err != nil {
		return fmt.Errorf("restore selinux labels: %w", err)
	}
	return nil
}
