package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vmlet/vmlet/storage/qemuimg"
)

// DefaultMaxImageBytes bounds the uncompressed size of an image's layers together.
const DefaultMaxImageBytes = 64 << 30

// Options configure a Cache.
type Options struct {
	// Dir is the cache folder (absolute); created if missing.
	Dir string
	// Keychain provides registry credentials (pull secrets resolved by the caller); nil means
	// anonymous. The host's docker config is never read implicitly.
	Keychain authn.Keychain
	// Platform picks the manifest of a multi-platform image; nil means linux/GOARCH.
	Platform *v1.Platform
	// Transport carries registry requests; nil means go-containerregistry's default.
	Transport http.RoundTripper
	// MaxImageBytes bounds the uncompressed size of an image; 0 means DefaultMaxImageBytes.
	MaxImageBytes int64
	// QemuImg inspects disk images.
	QemuImg qemuimg.Tool
}

// Cache pulls images into a folder and hands out their unpacked, read-only contents. It is safe
// for concurrent use, also by several processes sharing the folder.
type Cache struct {
	o        Options
	platform v1.Platform
}

// Image is an unpacked image in the cache.
type Image struct {
	Ref    string // the reference as given to Pull
	Digest string // "sha256:<hex>" of the image manifest
	Root   string // the unpacked file tree; read-only, shared by every user of the digest
	dir    string
}

// Open prepares the cache folder.
func Open(o Options) (*Cache, error) {
	if !filepath.IsAbs(o.Dir) || filepath.Clean(o.Dir) != o.Dir {
		return nil, fmt.Errorf("open image cache %q: must be an absolute clean path", o.Dir)
	}
	if o.MaxImageBytes <= 0 {
		o.MaxImageBytes = DefaultMaxImageBytes
	}
	c := &Cache{o: o, platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}
	if o.Platform != nil {
		c.platform = *o.Platform
	}
	for _, d := range []string{"images", "refs", "locks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("open image cache: %w", err)
		}
	}
	c.sweepTmp()
	return c, nil
}

// Dir is the cache folder.
func (c *Cache) Dir() string { return c.o.Dir }

// Pull makes the image available in the cache according to policy and returns it. An empty
// policy means DefaultPullPolicy(image). Errors are *ImageError.
//
//   - Always: resolve the reference at the source (one manifest request); download only when
//     the digest is not cached.
//   - IfNotPresent: use the cached image if this reference (or digest) was pulled before.
//   - Never: use the cached image or fail with ReasonErrImageNeverPull.
func (c *Cache) Pull(ctx context.Context, image string, policy PullPolicy) (*Image, error) {
	return c.PullWith(ctx, image, policy, nil)
}

// PullWith is Pull with a pull secret's credentials (nil: the cache's Keychain). A registry
// refusing them, or asking for credentials when none match, is ReasonErrImagePull wrapping
// ErrUnauthorized.
func (c *Cache) PullWith(ctx context.Context, image string, policy PullPolicy, creds Credentials) (*Image, error) {
	src, err := parseSource(image)
	if err != nil {
		return nil, &ImageError{Image: image, Reason: ReasonInvalidImageName, Err: err}
	}
	if policy == "" {
		policy = DefaultPullPolicy(image)
	}
	switch policy {
	case PullAlways, PullIfNotPresent, PullNever:
	default:
		return nil, imageErr(image, ReasonErrImagePull, "pull policy %q: %w", policy, errors.ErrUnsupported)
	}
	if policy != PullAlways {
		if img, ok := c.lookup(src); ok {
			return img, nil
		}
		if policy == PullNever {
			return nil, &ImageError{Image: image, Reason: ReasonErrImageNeverPull, Err: ErrNotPresent}
		}
	}
	var kc authn.Keychain = creds
	if creds == nil {
		kc = c.o.Keychain
	}
	return c.pull(ctx, src, kc, creds != nil)
}

func (c *Cache) pull(ctx context.Context, src *source, kc authn.Keychain, secret bool) (*Image, error) {
	rec := &digestRecorder{}
	r, err := c.resolve(ctx, src, rec, kc)
	if err == nil {
		err = c.unpack(ctx, r)
	}
	if err != nil {
		return nil, classify(src, rec, err, secret)
	}
	if err := c.writeRecord(src, r.digest); err != nil {
		return nil, imageErr(src.raw, ReasonErrImagePull, "%w", err)
	}
	return c.image(src.raw, r.digest), nil
}

// lookup finds a cached image for src without contacting the source.
func (c *Cache) lookup(src *source) (*Image, bool) {
	if src.pinned != nil && c.present(*src.pinned) {
		return c.image(src.raw, *src.pinned), true
	}
	b, err := os.ReadFile(c.recordPath(src))
	if err != nil {
		return nil, false
	}
	var rec refRecord
	if json.Unmarshal(b, &rec) != nil || rec.Key != src.key(c.platform) {
		return nil, false
	}
	h, err := v1.NewHash(rec.Digest)
	if err != nil || !c.present(h) {
		return nil, false
	}
	return c.image(src.raw, h), true
}

// refRecord remembers the image digest a reference resolved to on its last pull.
type refRecord struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
}

func (c *Cache) writeRecord(src *source, h v1.Hash) error {
	b, err := json.Marshal(refRecord{Key: src.key(c.platform), Digest: h.String()})
	if err != nil {
		return fmt.Errorf("record reference: %w", err)
	}
	return writeFileAtomic(c.recordPath(src), b)
}

func (c *Cache) recordPath(src *source) string {
	sum := sha256.Sum256([]byte(src.key(c.platform)))
	return filepath.Join(c.o.Dir, "refs", hex.EncodeToString(sum[:16])+".json")
}

func (c *Cache) imageDir(h v1.Hash) string {
	return filepath.Join(c.o.Dir, "images", h.Algorithm+"-"+h.Hex)
}

// present reports whether h is cached and intact: its metadata names h, and every file it
// recorded is still a regular file of the recorded size (a truncated or replaced file, or an
// entry renamed to another digest, is not present and gets pulled again). Checking contents
// against the layer digests would read every byte of every disk on every start; sizes catch a
// partial write or truncation for the price of a stat per file.
func (c *Cache) present(h v1.Hash) bool {
	img := c.image("", h)
	m, err := img.meta()
	if err != nil || m.Digest != h.String() {
		return false
	}
	for p, size := range m.Files {
		fi, err := os.Lstat(filepath.Join(img.Root, filepath.FromSlash(p)))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
			return false
		}
	}
	return true
}

func (c *Cache) image(ref string, h v1.Hash) *Image {
	dir := c.imageDir(h)
	return &Image{Ref: ref, Digest: h.String(), Root: filepath.Join(dir, rootfsDir), dir: dir}
}

// Remove deletes an unpacked image (by "sha256:<hex>") from the cache; removing an absent one
// is not an error. The caller makes sure no VM still uses it (overlays reference the base).
func (c *Cache) Remove(ctx context.Context, digest string) error {
	h, err := v1.NewHash(digest)
	if err != nil {
		return fmt.Errorf("remove image %q: %w: %w", digest, ErrInvalidReference, err)
	}
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return fmt.Errorf("remove image %s: %w", digest, err)
	}
	defer unlock()
	if err := forceRemoveAll(c.imageDir(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove image %s: %w", digest, err)
	}
	return nil
}
