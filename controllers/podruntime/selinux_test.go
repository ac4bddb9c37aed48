package podruntime

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/selinuxlabel"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestRunDirLabel: a launcher pod's new run folder gets the planned type at s0 (its pod's level
// is the container runtime's choice, unknown yet); a folder that exists keeps the label the
// agent gave it since (at the launcher's level).
func TestRunDirLabel(t *testing.T) {
	prereq.Root(t) // chown and security.* xattrs
	r := newRuntime(t)
	spec := process.Spec{ID: "uid-1", DirLabel: "system_u:object_r:container_file_t:s0:c1,c2"}
	if _, err := r.Ensure(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if got, _, err := selinuxlabel.FileLabel(r.Dir("uid-1")); err != nil || got != "system_u:object_r:container_file_t:s0" {
		t.Fatalf("new run folder labelled %q (%v), want container_file_t at s0", got, err)
	}
	const relabelled = "system_u:object_r:container_file_t:s0:c1,c2"
	if err := unix.Lsetxattr(r.Dir("uid-1"), selinuxlabel.XattrName, []byte(relabelled), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Ensure(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := selinuxlabel.FileLabel(r.Dir("uid-1")); got != relabelled {
		t.Errorf("existing run folder relabelled to %q, want the agent's %q kept", got, relabelled)
	}
}
