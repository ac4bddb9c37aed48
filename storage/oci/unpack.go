package oci

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vmlet/vmlet/internal/revert"
)

const (
	metaFile   = "image.json"
	rootfsDir  = "rootfs"
	maxEntries = 1 << 20 // tar entries per image
)

// imageMeta is written next to the unpacked tree.
type imageMeta struct {
	Digest  string            `json:"digest"`
	Config  string            `json:"config"`
	Layers  []string          `json:"layers"`
	Bytes   int64             `json:"bytes"`   // uncompressed layer bytes
	Skipped map[string]string `json:"skipped"` // path in image → tar type not unpacked (symlinks, devices…)
	// Files are the unpacked regular files (path in image → size), what intact checks a
	// cached entry against; absent in entries written before it was recorded.
	Files map[string]int64 `json:"files,omitempty"`
}

// unpack downloads and unpacks r into images/<digest>/ unless it is there already. Only one
// unpacker per digest runs at a time (flock); the tree is built in tmp/ and renamed into place.
func (c *Cache) unpack(ctx context.Context, r *resolved) error {
	unlock, err := c.lock(ctx, r.digest)
	if err != nil {
		return err
	}
	defer unlock()
	if c.present(r.digest) {
		return nil
	}
	// Holding the lock: an entry that is no longer what was unpacked (a file truncated or
	// replaced, metadata of another digest) goes, and the image is unpacked again.
	if err := forceRemoveAll(c.imageDir(r.digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unpack: remove damaged entry: %w", err)
	}
	// Holding the lock: leftovers of killed unpackers of this digest can go.
	stale, _ := filepath.Glob(filepath.Join(c.o.Dir, "tmp", r.digest.Hex+"-*"))
	for _, s := range stale {
		_ = forceRemoveAll(s)
	}
	tmp, err := os.MkdirTemp(filepath.Join(c.o.Dir, "tmp"), r.digest.Hex+"-")
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	undo := revert.New()
	defer undo.Fail()
	undo.Add(func() { _ = forceRemoveAll(tmp) })
	st := &unpackState{root: filepath.Join(tmp, rootfsDir), limit: c.o.MaxImageBytes, files: c.o.MaxImageBytes,
		entries: maxEntries, meta: imageMeta{Digest: r.digest.String(), Skipped: map[string]string{}}}
	if err := os.Mkdir(st.root, 0o755); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if err := st.image(ctx, r.img); err != nil {
		return err
	}
	if err := makeReadOnly(st.root); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if st.meta.Files, err = fileSizes(st.root); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	b, err := json.MarshalIndent(st.meta, "", "  ")
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(tmp, metaFile), b); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if err := os.Rename(tmp, c.imageDir(r.digest)); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	undo.Success()
	return nil
}

type unpackState struct {
	root    string
	limit   int64 // uncompressed bytes left
	files   int64 // bytes of files left (hard links and sparse holes count in full)
	entries int
	meta    imageMeta
	layer   map[string]bool // paths written by the current layer (for opaque whiteouts)
}

// image checks the config against the manifest and unpacks every layer in order.
func (st *unpackState) image(ctx context.Context, img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("read manifest: %w", err)
	}
	if err := checkRaw("config", img.RawConfigFile, m.Config.Digest); err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("read config: %w: %w", ErrInvalidImage, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return fmt.Errorf("config lists %d diff_ids for %d layers: %w", len(cfg.RootFS.DiffIDs), len(m.Layers), ErrInvalidImage)
	}
	st.meta.Config = m.Config.Digest.String()
	for i, desc := range m.Layers {
		l, err := img.LayerByDigest(desc.Digest)
		if err != nil {
			return fmt.Errorf("fetch layer %s: %w", desc.Digest, err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("fetch layer %s: %w", desc.Digest, err)
		}
		err = st.layerBlob(ctx, rc, desc, cfg.RootFS.DiffIDs[i])
		rc.Close()
		if err != nil {
			return fmt.Errorf("unpack layer %d (%s): %w", i, desc.Digest, err)
		}
		st.meta.Layers = append(st.meta.Layers, desc.Digest.String())
	}
	return nil
}

// layerBlob unpacks one layer blob, hashing exactly the bytes it reads. The blob's digest and
// size are judged first, whatever else failed: a registry or layout serving other bytes than
// the manifest names is a digest mismatch, not a broken image.
func (st *unpackState) layerBlob(ctx context.Context, rc io.Reader, desc v1.Descriptor, diffID v1.Hash) error {
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(rc, h)}
	br := bufio.NewReaderSize(cr, 1<<16)
	applyErr := st.layerStream(ctx, br, diffID)
	var drainErr error
	if ctx.Err() == nil && cr.n <= desc.Size {
		_, drainErr = io.Copy(io.Discard, io.LimitReader(br, desc.Size-cr.n+1))
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	switch {
	case cr.n > desc.Size:
		return &DigestError{What: "layer size", Want: fmt.Sprint(desc.Size), Got: fmt.Sprintf("more than %d", desc.Size)}
	case cr.n == desc.Size && got != desc.Digest.String():
		return &DigestError{What: "layer", Want: desc.Digest.String(), Got: got}
	case applyErr != nil:
		return applyErr
	case drainErr != nil:
		return fmt.Errorf("read layer: %w", drainErr)
	case cr.n < desc.Size:
		return &DigestError{What: "layer size", Want: fmt.Sprint(desc.Size), Got: fmt.Sprint(cr.n)}
	}
	return nil
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// layerStream decompresses (gzip or none, by magic bytes), applies the tar and checks the
// uncompressed stream against the config's diff_id.
func (st *unpackState) layerStream(ctx context.Context, br *bufio.Reader, diffID v1.Hash) error {
	magic, _ := br.Peek(4)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("decompress layer: %w: %w", ErrInvalidImage, err)
		}
		defer zr.Close()
		r = zr
	case bytes.HasPrefix(magic, zstdMagic):
		return fmt.Errorf("zstd layers are not supported: %w", ErrInvalidImage)
	}
	h := sha256.New()
	before := st.limit
	lim := &limitReader{r: r, left: st.limit}
	ur := io.TeeReader(lim, h)
	if err := st.applyTar(ctx, ur); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, ur); err != nil { // tar padding after the end marker
		return fmt.Errorf("read layer: %w", err)
	}
	st.limit = lim.left
	st.meta.Bytes += before - lim.left
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID.String() {
		return &DigestError{What: "diff_id", Want: diffID.String(), Got: got}
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// limitReader fails with ErrTooLarge once more than left bytes were read.
type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, fmt.Errorf("uncompressed layers exceed the limit: %w", ErrTooLarge)
	}
	return n, err
}

// skip records an entry of the image that is not unpacked.
func (st *unpackState) skip(name, why string) {
	st.meta.Skipped["/"+name] = why
}

// forget drops skipped entries at or below name (a whiteout or a replacement removed them).
func (st *unpackState) forget(name string) {
	for p := range st.meta.Skipped {
		if p == "/"+name || strings.HasPrefix(p, "/"+name+"/") {
			delete(st.meta.Skipped, p)
		}
	}
}
