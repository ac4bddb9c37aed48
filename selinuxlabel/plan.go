package selinuxlabel

import (
	"fmt"
	"path/filepath"
	"slices"
)

// Default file types (container-selinux's), and KubeVirt's launcher process type.
const (
	// DefaultFileType is the type of a VM's own files: what container_t (and KubeVirt's
	// virt_launcher.process) may read and write at its own level.
	DefaultFileType = "container_file_t"
	// DefaultSharedType is the type of shared read-only content (the image cache).
	DefaultSharedType = "container_ro_file_t"
	// DefaultProcessType is the launcher's process type when none is configured: the
	// container runtimes' default.
	DefaultProcessType = "container_t"
	// KubeVirtProcessType is the type KubeVirt's selinuxLauncherType setting names for its own
	// policy module (virt_launcher.process); usable only where that module is installed.
	KubeVirtProcessType = "virt_launcher.process"
	// SharedLevel is the level of shared content: no categories, readable at every level.
	SharedLevel = "s0"
	fileUser    = "system_u"
	fileRole    = "object_r"
)

// Kind is how a planned path relates to the VM, which decides its label and its teardown.
type Kind string

// Kinds of planned paths.
const (
	// Private: made for this VM in its storage or run folder; labelled at the launcher's
	// level; removed with its folder (nothing to restore).
	Private Kind = "private"
	// Shared: read-only content several VMs read (image cache); labelled SharedType:s0 and
	// left so on teardown (other VMs may still read it).
	Shared Kind = "shared"
	// Host: a host file the VM is given (hostDisk, claim, an ephemeral overlay's claim image);
	// labelled at the launcher's level and restored to its previous label on teardown.
	Host Kind = "host"
)

// Files are what the agent prepared for one VM, by kind (absolute, symlink-free paths).
type Files struct {
	Private []string
	Shared  []string
	Host    []string
}

// Options name the file types; empty fields mean the defaults.
type Options struct {
	FileType, SharedType string
}

// Label is one planned label.
type Label struct {
	Path    string `json:"path"`
	Kind    Kind   `json:"kind"`
	Context string `json:"context"`
}

// Plan says which path of files gets which file context for a launcher running as launcher:
// Private and Host paths get system_u:object_r:FileType:<launcher's level>, Shared paths
// system_u:object_r:SharedType:s0. A path named twice keeps its first kind in the order
// Shared, Host, Private (a kernel hard link in the VM folder is the shared cache's inode).
// Sorted by path. Pure.
func Plan(launcher Context, files Files, o Options) ([]Label, error) {
	if err := CheckLevel(launcher.Level); err != nil {
		return nil, fmt.Errorf("plan labels: launcher %s: %w", launcher, err)
	}
	if o.FileType == "" {
		o.FileType = DefaultFileType
	}
	if o.SharedType == "" {
		o.SharedType = DefaultSharedType
	}
	own := Context{User: fileUser, Role: fileRole, Type: o.FileType, Level: launcher.Level}.String()
	shared := Context{User: fileUser, Role: fileRole, Type: o.SharedType, Level: SharedLevel}.String()
	seen := map[string]bool{}
	var out []Label
	for _, g := range []struct {
		kind  Kind
		paths []string
		ctx   string
	}{{Shared, files.Shared, shared}, {Host, files.Host, own}, {Private, files.Private, own}} {
		for _, p := range g.paths {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				return nil, fmt.Errorf("plan labels: %q is not an absolute clean path", p)
			}
			if seen[p] {
				continue
			}
			seen[p] = true
			out = append(out, Label{Path: p, Kind: g.kind, Context: g.ctx})
		}
	}
	slices.SortFunc(out, func(a, b Label) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return out, nil
}

// Entry is one journal line: a label Apply wrote and what the path had before ("" with
// Had false: no label at all).
type Entry struct {
	Label
	Previous string `json:"previous,omitempty"`
	Had      bool   `json:"had"`
}

// Teardown says what to do with each journal entry when the VM is gone: Host entries get
// their previous label back (Remove: the attribute is removed, it had none); Private entries
// go with their folders and Shared entries stay for the other VMs (neither is returned). Pure.
func Teardown(journal []Entry) []Restore {
	var out []Restore
	for _, e := range journal {
		if e.Kind != Host {
			continue
		}
		out = append(out, Restore{Path: e.Path, Context: e.Previous, Remove: !e.Had})
	}
	return out
}

// Restore is one teardown step: Path gets Context back, or loses its label (Remove).
type Restore struct {
	Path    string
	Context string
	Remove  bool
}

// LauncherContext is the context vmlet runs a launcher with where it chooses (local mode):
// system_u:system_r:<processType>:<level> (processType "" is DefaultProcessType). Pure.
func LauncherContext(processType, level string) Context {
	if processType == "" {
		processType = DefaultProcessType
	}
	return Context{User: fileUser, Role: "system_r", Type: processType, Level: level}
}
