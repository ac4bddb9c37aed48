package faultpoint_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlet/vmlet/internal/faultpoint"
)

func TestPoints(t *testing.T) {
	dir := t.TempDir()
	p := faultpoint.New(" teardown.launcher-removed , storage.action-done:empty", dir)
	for _, tc := range []struct {
		name, detail string
		want         bool
	}{
		{"teardown.launcher-removed", "", true},
		{"teardown.launcher-removed", "anything", true},
		{"storage.action-done", "empty", true},
		{"storage.action-done", "iso", false},
		{"storage.action-done", "", false},
		{"other", "", false},
	} {
		if got := p.Armed(tc.name, tc.detail); got != tc.want {
			t.Errorf("Armed(%q, %q) = %v, want %v", tc.name, tc.detail, got, tc.want)
		}
	}
	if p.Stop("storage.action-done", "iso") {
		t.Error("a point armed for another detail stopped")
	}
	if !p.Stop("storage.action-done", "empty") {
		t.Fatal("the armed point did not stop")
	}
	b, err := os.ReadFile(filepath.Join(dir, faultpoint.SignName("storage.action-done")))
	if err != nil || string(b) != "empty" {
		t.Errorf("sign: %q, %v; want the detail", b, err)
	}
	if p.Stop("storage.action-done", "empty") {
		t.Error("a point stopped twice in one process")
	}
}

func TestDisarmed(t *testing.T) {
	var nilPoints *faultpoint.Points
	for _, p := range []*faultpoint.Points{nilPoints, faultpoint.New("", ""), faultpoint.New(" , ", t.TempDir())} {
		if p.Armed("teardown.launcher-removed", "") || p.Stop("teardown.launcher-removed", "") {
			t.Errorf("%+v stops", p)
		}
	}
	faultpoint.Hit("teardown.launcher-removed", "") // this test process armed nothing: returns
}
