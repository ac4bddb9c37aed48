package oci

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// lock takes the cache-wide exclusive lock of a digest (flock on locks/<digest>.lock), waiting
// until ctx ends. Locks are per open file, so goroutines of one process exclude each other too.
func (c *Cache) lock(ctx context.Context, h v1.Hash) (unlock func(), err error) {
	path := filepath.Join(c.o.Dir, "locks", h.Algorithm+"-"+h.Hex+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", h, err)
	}
	type result struct{ err error }
	got := make(chan result, 1)
	go func() { got <- result{unix.Flock(int(f.Fd()), unix.LOCK_EX)} }()
	select {
	case r := <-got:
		if err := r.err; err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", h, err)
		}
		return func() { f.Close() }, nil // closing the file releases the flock
	case <-ctx.Done():
		go func() { <-got; f.Close() }() // a flock granted after all dies with its file
		return nil, fmt.Errorf("lock %s: %w", h, ctx.Err())
	}
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// makeReadOnly sets files to 0444 and folders to 0555 under root (root included).
func makeReadOnly(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p) // chmod after the walk: a 0555 folder can still be listed
			return nil
		}
		return os.Chmod(p, 0o444)
	})
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", root, err)
	}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o555); err != nil {
			return fmt.Errorf("make %s read-only: %w", root, err)
		}
	}
	return nil
}

// fileSizes lists the regular files under root (path relative to root, slash-separated) with
// their sizes.
func fileSizes(root string) (map[string]int64, error) {
	out := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		r, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(r)] = fi.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	return out, nil
}

// forceRemoveAll removes path even when it holds read-only folders (as a non-root user would
// otherwise fail to).
func forceRemoveAll(path string) error {
	if _, err := os.Lstat(path); err != nil {
		return err
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(path)
}

// sweepTmp removes what unpackers killed mid-way left in tmp/ (an agent SIGKILLed during a
// pull leaves its half-unpacked tree there): every entry whose digest lock nobody holds. An
// unpacker of that digest would also remove it, but only if the image is pulled again.
func (c *Cache) sweepTmp() {
	entries, err := os.ReadDir(filepath.Join(c.o.Dir, "tmp"))
	if err != nil {
		return
	}
	for _, e := range entries {
		hex, _, ok := strings.Cut(e.Name(), "-")
		if !ok || len(hex) != 64 {
			continue
		}
		path := filepath.Join(c.o.Dir, "locks", "sha256-"+hex+".lock")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil { // else: being unpacked now
			_ = forceRemoveAll(filepath.Join(c.o.Dir, "tmp", e.Name()))
		}
		f.Close()
	}
}
