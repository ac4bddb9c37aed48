package controllers

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers/process"
)

// TestReadyWatch: the rename of the starting socket to the ready name wakes the launcher's id,
// once; other files do not; closing ends the watch.
func TestReadyWatch(t *testing.T) {
	got := make(chan string, 4)
	w, err := newReadyWatch(func(id string) { got <- id })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Start(ctx) }()
	dir := t.TempDir()
	if err := w.add("vm-1", dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "launcher.log"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	starting := filepath.Join(dir, process.StartingSocket)
	if err := os.WriteFile(starting, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(starting, filepath.Join(dir, process.ReadySocket)); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != "vm-1" {
			t.Fatalf("woke %q, want vm-1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up for the ready socket")
	}
	w.mu.Lock()
	left := len(w.wds)
	w.mu.Unlock()
	if left != 0 {
		t.Errorf("%d watches left after the wake-up", left)
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case id := <-got:
		t.Errorf("second wake-up %q", id)
	default:
	}
}
