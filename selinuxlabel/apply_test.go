package selinuxlabel

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/selinux/go-selinux"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/prereq"
)

// TestApplyRestore writes a plan's labels as root (security.selinux needs CAP_SYS_ADMIN
// without an SELinux policy loaded), reads them back, refuses a symlink without touching its
// target, is idempotent (the journal keeps the labels from before the first Apply), and
// restores host files: the previous label back, or none.
func TestApplyRestore(t *testing.T) {
	prereq.Root(t)
	dir := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	priv, shared, host, bare := mk("overlay.qcow2"), mk("base.img"), mk("host.img"), mk("new.img")
	const before = "system_u:object_r:default_t:s0"
	if err := unix.Lsetxattr(host, XattrName, []byte(before), 0); err != nil {
		t.Fatal(err)
	}
	l := LauncherContext("", "s0:c7,c9")
	labels, err := Plan(l, Files{Private: []string{priv}, Shared: []string{shared}, Host: []string{host, bare}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(dir, "journal.json")
	for i := 0; i < 2; i++ {
		if err := Apply(journal, labels); err != nil {
			t.Fatal(err)
		}
		for _, lb := range labels {
			if got, ok, err := FileLabel(lb.Path); err != nil || !ok || got != lb.Context {
				t.Errorf("apply %d: %s labelled %q (%v, %v), want %q", i, lb.Path, got, ok, err, lb.Context)
			}
		}
	}
	entries, err := ReadJournal(journal)
	if err != nil || len(entries) != len(labels) {
		t.Fatalf("journal %v (%v), want %d entries", entries, err, len(labels))
	}
	for _, e := range entries {
		if e.Path == host && (e.Previous != before || !e.Had) {
			t.Errorf("journal lost the host file's previous label: %+v", e)
		}
	}

	target := mk("target.img")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Apply(journal, []Label{{Path: link, Kind: Host, Context: labels[0].Context}}); !errors.Is(err, ErrSymlink) {
		t.Errorf("apply to a symlink: %v, want ErrSymlink", err)
	}
	if _, ok, _ := FileLabel(target); ok {
		t.Error("the symlink's target was labelled")
	}

	if err := RestoreJournal(journal); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := FileLabel(host); got != before {
		t.Errorf("host file restored to %q, want %q", got, before)
	}
	if got, ok, _ := FileLabel(bare); ok {
		t.Errorf("host file without a label before keeps %q", got)
	}
	if got, _, _ := FileLabel(shared); got != "system_u:object_r:container_ro_file_t:s0" {
		t.Errorf("shared content restored to %q: other VMs still read it", got)
	}
}

// TestDisabledNoProcessCalls: on a node whose SELinux is disabled, the probe says so and the
// process-label calls return ErrDisabled without asking the kernel. On an SELinux host it checks
// the opposite: the probe reports enabled and the agent's own label parses.
func TestDisabledNoProcessCalls(t *testing.T) {
	st := Probe()
	if selinux.GetEnabled() {
		if !st.Enabled || st.Mode == ModeDisabled {
			t.Fatalf("probe %+v on an SELinux host", st)
		}
		if _, err := ProcessLabel(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		return
	}
	if st != (State{Mode: ModeDisabled}) {
		t.Fatalf("probe %+v, want disabled", st)
	}
	n := ProcessCalls()
	if _, err := ProcessLabel(os.Getpid()); !errors.Is(err, ErrDisabled) {
		t.Errorf("ProcessLabel: %v, want ErrDisabled", err)
	}
	called := false
	if err := WithExecLabel(LauncherContext("", "s0:c1,c2"), func() error { called = true; return nil }); !errors.Is(err, ErrDisabled) || called {
		t.Errorf("WithExecLabel: %v (started %v), want ErrDisabled and no start", err, called)
	}
	if d := ProcessCalls() - n; d != 0 {
		t.Errorf("%d process-label calls made on a disabled node", d)
	}
}
