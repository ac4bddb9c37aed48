package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestOpenSweepsKilledUnpacks: a half-unpacked tree an unpacker left in tmp/ when it was killed
// (an agent SIGKILLed during a pull) is removed when the cache is opened again, unless its
// digest is being unpacked right now (its lock held).
func TestOpenSweepsKilledUnpacks(t *testing.T) {
	c := newCache(t)
	dead := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 64)}
	busy := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("b", 64)}
	for _, h := range []v1.Hash{dead, busy} {
		if err := os.MkdirAll(filepath.Join(c.Dir(), "tmp", h.Hex+"-123", "rootfs", "boot"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(c.Dir(), "tmp", "not-an-unpack")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unlock, err := c.lock(ctxT(t), busy)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := Open(c.o); err != nil {
		t.Fatal(err)
	}
	if got := cacheEntries(t, c, "tmp"); len(got) != 2 || !strings.HasPrefix(got[0], busy.Hex) || got[1] != "not-an-unpack" {
		t.Errorf("tmp/ after Open: %v, want the locked unpack and the foreign file only", got)
	}
}
