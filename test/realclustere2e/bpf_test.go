package realclustere2e_test

import (
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// devicePrograms are the IDs of the device programs attached to a cgroup-v2 folder.
// Equivalent to: bpftool cgroup show <cgroup>
func devicePrograms(t testing.TB, cgroup string) []uint32 {
	t.Helper()
	f, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		t.Fatalf("query device programs of %s: %v", cgroup, err)
	}
	var ids []uint32
	for _, p := range res.Programs {
		ids = append(ids, uint32(p.ID))
	}
	return ids
}

// programExists: a BPF program with this ID is still loaded.
func programExists(id uint32) bool {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	_ = p.Close()
	return true
}
