package qemuimg

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

func TestCreateAndInfo(t *testing.T) {
	prereq.QEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	var tool Tool
	base := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(base, make([]byte, 2<<20), 0o444); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.qcow2")
	if err := tool.CreateQCOW2(ctx, empty, CreateOptions{SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "over, lay=1.qcow2") // commas and '=' are only file name characters here
	if err := tool.CreateQCOW2(ctx, overlay, CreateOptions{Backing: base, BackingFormat: "raw"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path        string
		format      string
		virtualSize int64
		backing     string
	}{
		{base, "raw", 2 << 20, ""},
		{empty, "qcow2", 1 << 30, ""},
		{overlay, "qcow2", 2 << 20, base},
	}
	for _, tt := range tests {
		info, err := tool.Info(ctx, tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Format != tt.format || info.VirtualSize != tt.virtualSize || info.BackingFilename != tt.backing {
			t.Errorf("Info(%s) = %+v, want %s %d backing %q", tt.path, info, tt.format, tt.virtualSize, tt.backing)
		}
		if tt.backing != "" && info.BackingFormat != "raw" {
			t.Errorf("backing format = %q, want raw (never probed)", info.BackingFormat)
		}
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() > 1<<20 {
		t.Errorf("1 GiB qcow2 takes %d bytes: not sparse (%v)", fi.Size(), err)
	}

	// Failures are typed and carry qemu-img's stderr; bad arguments never reach qemu-img.
	if err := tool.CreateQCOW2(ctx, empty, CreateOptions{SizeBytes: 1 << 20}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create over an existing file: %v, want fs.ErrExist", err)
	}
	if info, err := tool.Info(ctx, empty); err != nil || info.VirtualSize != 1<<30 {
		t.Errorf("existing image changed: %+v, %v", info, err)
	}
	missingBacking := filepath.Join(dir, "nobase.qcow2")
	err := tool.CreateQCOW2(ctx, missingBacking, CreateOptions{Backing: filepath.Join(dir, "none"), BackingFormat: "raw"})
	if qe, ok := errors.AsType[*Error](err); !ok || qe.Stderr == "" {
		t.Errorf("overlay of a missing file: %v, want *Error with stderr", err)
	}
	if _, err := os.Lstat(missingBacking); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed create left %s: %v", missingBacking, err)
	}
	if _, err := tool.Info(ctx, filepath.Join(dir, "missing")); err == nil {
		t.Error("Info of a missing file succeeded")
	}
	for _, p := range []string{"rel.qcow2", "nbd:localhost:10809", "/a/../b"} {
		if _, err := tool.Info(ctx, p); !errors.Is(err, ErrNotAbsolute) {
			t.Errorf("Info(%q) = %v, want ErrNotAbsolute", p, err)
		}
	}
	if err := tool.CreateQCOW2(ctx, filepath.Join(dir, "x"), CreateOptions{Backing: base, BackingFormat: "vmdk"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("backing format vmdk: %v", err)
	}
	if err := tool.CreateQCOW2(ctx, filepath.Join(dir, "x"), CreateOptions{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("no size: %v", err)
	}
}
