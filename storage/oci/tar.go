package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	copyChunk      = 1 << 20
)

// applyTar unpacks one layer over the tree: regular files and folders only. Symlinks, devices
// and fifos are recorded as skipped (they replace what lower layers had at their path), hard
// links become copies of their (already unpacked) target, and whiteouts delete lower-layer
// entries. Since nothing but plain files and folders is ever created, no path inside the tree
// can lead out of it; names are cleaned as if the tree were "/".
func (st *unpackState) applyTar(ctx context.Context, r io.Reader) error {
	st.layer = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return err
			}
			return fmt.Errorf("read tar: %w: %w", ErrInvalidImage, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if st.entries--; st.entries < 0 {
			return fmt.Errorf("more than %d entries: %w", maxEntries, ErrTooLarge)
		}
		name, ok := cleanName(hdr.Name)
		if !ok {
			continue // the root folder itself
		}
		if err := st.entry(ctx, tr, hdr, name); err != nil {
			return err
		}
	}
}

func (st *unpackState) entry(ctx context.Context, tr *tar.Reader, hdr *tar.Header, name string) error {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if base == whiteoutOpaque {
		return st.opaque(dir)
	}
	if strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix) {
		return nil // other aufs metadata (.wh..wh.plnk, .wh..wh.aufs): not part of the tree
	}
	if hidden, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		if hidden == "" || hidden == "." || hidden == ".." {
			// ".wh..." would name the folder above dir: outside the tree for dir "".
			return fmt.Errorf("whiteout %s names no entry: %w", name, ErrInvalidImage)
		}
		target := path.Join(dir, hidden)
		st.forget(target)
		return st.remove(target)
	}
	for p := name; p != "." && !st.layer[p]; p = path.Dir(p) {
		st.layer[p] = true // and its parents: an opaque folder keeps this layer's whole tree
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return st.mkdirs(name)
	case tar.TypeReg:
		if err := st.replace(name); err != nil {
			return err
		}
		return st.writeFile(ctx, name, tr, hdr.Size)
	case tar.TypeLink:
		target, ok := cleanName(hdr.Linkname)
		if !ok {
			return fmt.Errorf("hard link %s to the root folder: %w", name, ErrInvalidImage)
		}
		src, err := os.Open(st.host(target))
		if err != nil {
			return fmt.Errorf("hard link %s to %s: %w: %w", name, target, ErrInvalidImage, err)
		}
		defer src.Close()
		fi, err := src.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("hard link %s to %s: not a regular file: %w", name, target, ErrInvalidImage)
		}
		if err := st.replace(name); err != nil {
			return err
		}
		return st.writeFile(ctx, name, src, fi.Size())
	default:
		if err := st.remove(name); err != nil {
			return err
		}
		st.skip(name, tarType(hdr.Typeflag))
		return nil
	}
}

// host maps a cleaned image path to the tree.
func (st *unpackState) host(name string) string {
	return filepath.Join(st.root, filepath.FromSlash(name))
}

// mkdirs creates name and its parents, replacing files that lower layers had in their way.
func (st *unpackState) mkdirs(name string) error {
	cur := ""
	for _, part := range strings.Split(name, "/") {
		cur = path.Join(cur, part)
		p := st.host(cur)
		fi, err := os.Lstat(p)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("unpack %s: %w", cur, err)
			}
			st.forget(cur)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("unpack %s: %w", cur, err)
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("unpack %s: %w", cur, err)
		}
	}
	return nil
}

// replace makes room for a file at name: parents exist, nothing is at name.
func (st *unpackState) replace(name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := st.mkdirs(dir); err != nil {
			return err
		}
	}
	st.forget(name)
	return st.remove(name)
}

// remove removes name and what is below it; nothing there (also: a file where a parent folder
// would be, as for a whiteout of "file/x") is no error.
func (st *unpackState) remove(name string) error {
	if err := os.RemoveAll(st.host(name)); err != nil && !errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("unpack %s: %w", name, err)
	}
	return nil
}

// opaque empties dir, at every depth, of everything lower layers put there: what this layer
// wrote (and the folders leading to it) stays.
func (st *unpackState) opaque(dir string) error {
	ents, err := os.ReadDir(st.host(dir))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil // no folder there (a file, as for "file/.wh..wh..opq"): nothing to empty
	}
	if err != nil {
		return fmt.Errorf("unpack %s: %w", dir, err)
	}
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		switch {
		case !st.layer[p]:
			if err := st.remove(p); err != nil {
				return err
			}
		case e.IsDir():
			if err := st.opaque(p); err != nil {
				return err
			}
		}
	}
	for p := range st.meta.Skipped {
		rel := strings.TrimPrefix(p, "/")
		if (dir == "" || strings.HasPrefix(rel, dir+"/")) && !st.layer[rel] {
			delete(st.meta.Skipped, p)
		}
	}
	return nil
}

// writeFile writes size bytes from r to a new file, leaving holes where whole chunks are zero
// (raw disk images are mostly zeros).
func (st *unpackState) writeFile(ctx context.Context, name string, r io.Reader, size int64) error {
	// Charged apart from the stream: a hard link copies its target and a sparse entry expands
	// its holes, so the files can be far larger than the stream that describes them.
	if st.files -= size; size < 0 || st.files < 0 {
		return fmt.Errorf("unpack %s: files larger than the limit: %w", name, ErrTooLarge)
	}
	f, err := os.OpenFile(st.host(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", name, err)
	}
	err = copySparse(ctx, f, r, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpack %s: %w", name, err)
	}
	return nil
}

var zeroChunk = make([]byte, copyChunk)

func copySparse(ctx context.Context, f *os.File, r io.Reader, size int64) error {
	buf := make([]byte, copyChunk)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int(min(int64(len(buf)), size-off))
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			if errors.Is(err, ErrTooLarge) {
				return err
			}
			return fmt.Errorf("%w: %w", ErrInvalidImage, err)
		}
		if !bytes.Equal(buf[:n], zeroChunk[:n]) {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
		off += int64(n)
	}
	return f.Truncate(size)
}

// cleanName maps a tar entry name to a relative slash path inside the tree ("../x" and "/x"
// become "x"); ok is false for the root itself.
func cleanName(n string) (string, bool) {
	c := path.Clean("/" + n)
	if c == "/" {
		return "", false
	}
	return c[1:], true
}

func tarType(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeChar:
		return "char device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	default:
		return fmt.Sprintf("tar type %q", t)
	}
}
