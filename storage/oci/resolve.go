package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"regexp"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// resolved is one platform's image manifest, checked against its digest, ready to unpack.
type resolved struct {
	img    v1.Image
	digest v1.Hash
}

func (c *Cache) resolve(ctx context.Context, src *source, rec *digestRecorder, kc authn.Keychain) (*resolved, error) {
	if src.registry != nil {
		return c.resolveRemote(ctx, src, rec, kc)
	}
	return c.resolveLayout(src)
}

// resolveRemote fetches the manifest (GET /v2/<repo>/manifests/<ref>) and, for an index, the
// manifest of c.platform.
func (c *Cache) resolveRemote(ctx context.Context, src *source, rec *digestRecorder, kc authn.Keychain) (*resolved, error) {
	base := c.o.Transport
	if base == nil {
		base = remote.DefaultTransport
	}
	rec.base = base
	if kc == nil {
		kc = anonymous{}
	}
	desc, err := remote.Get(src.registry,
		remote.WithContext(ctx), remote.WithTransport(rec), remote.WithAuthFromKeychain(kc),
		remote.WithPlatform(c.platform), remote.WithUserAgent("vmlet"))
	if err != nil {
		return nil, fmt.Errorf("fetch manifest: %w", err)
	}
	got := sha256Hash(desc.Manifest)
	if src.pinned != nil && got != *src.pinned {
		return nil, &DigestError{What: "manifest", Want: src.pinned.String(), Got: got.String()}
	}
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("read index: %w", err)
		}
		return c.fromIndex(idx)
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		return &resolved{img: img, digest: got}, nil
	default:
		return nil, fmt.Errorf("manifest media type %q: %w", desc.MediaType, ErrInvalidImage)
	}
}

// resolveLayout finds the manifest in an OCI layout: by digest, by its ref.name annotation,
// or the only one.
func (c *Cache) resolveLayout(src *source) (*resolved, error) {
	p, err := layout.FromPath(src.layoutDir)
	if err != nil {
		return nil, fmt.Errorf("open layout: %w: %w", ErrNotFound, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read layout index: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read layout index: %w", err)
	}
	var found []v1.Descriptor
	for _, d := range im.Manifests {
		switch {
		case src.pinned != nil:
			if d.Digest == *src.pinned {
				found = append(found, d)
			}
		case src.layoutTag != "":
			if d.Annotations[refNameAnnotation] == src.layoutTag {
				found = append(found, d)
			}
		default:
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("find manifest in layout (%d match): %w", len(found), ErrNotFound)
	}
	d := found[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read index %s: %w", d.Digest, err)
		}
		if err := checkRaw("manifest", child.RawManifest, d.Digest); err != nil {
			return nil, err
		}
		return c.fromIndex(child)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", d.Digest, err)
	}
	if err := checkRaw("manifest", img.RawManifest, d.Digest); err != nil {
		return nil, err
	}
	return &resolved{img: img, digest: d.Digest}, nil
}

// fromIndex picks c.platform's image from an index and checks its manifest digest.
func (c *Cache) fromIndex(idx v1.ImageIndex) (*resolved, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() || d.Platform == nil || !d.Platform.Satisfies(c.platform) {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read manifest %s: %w", d.Digest, err)
		}
		if err := checkRaw("manifest", img.RawManifest, d.Digest); err != nil {
			return nil, err
		}
		return &resolved{img: img, digest: d.Digest}, nil
	}
	return nil, fmt.Errorf("no manifest for platform %s in index: %w", c.platform.String(), ErrNotFound)
}

func checkRaw(what string, raw func() ([]byte, error), want v1.Hash) error {
	b, err := raw()
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	if got := sha256Hash(b); got != want {
		return &DigestError{What: what, Want: want.String(), Got: got.String()}
	}
	return nil
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// classify turns a pull failure into an ImageError with a reason.
func classify(src *source, rec *digestRecorder, err error, secret bool) error {
	image := src.raw
	if _, ok := errors.AsType[*ImageError](err); ok {
		return err
	}
	if de := rec.mismatch(); de != nil && !errors.Is(err, ErrDigestMismatch) {
		err = fmt.Errorf("%w (%w)", de, err)
	}
	switch {
	case errors.Is(err, ErrDigestMismatch):
		return &ImageError{Image: image, Reason: ReasonDigestMismatch, Err: err}
	case errors.Is(err, ErrInvalidImage), errors.Is(err, ErrTooLarge):
		return &ImageError{Image: image, Reason: ReasonInvalidImage, Err: err}
	}
	if te, ok := errors.AsType[*transport.Error](err); ok {
		switch {
		case notFound(te):
			err = fmt.Errorf("%w: %w", ErrNotFound, err)
		case unauthorized(te) && secret:
			err = fmt.Errorf("%w: registry %s refused the image pull secret's credentials: %w", ErrUnauthorized, src.registry.Context().RegistryStr(), err)
		case unauthorized(te):
			err = fmt.Errorf("%w: registry %s asks for credentials and none were given (imagePullSecret): %w", ErrUnauthorized, src.registry.Context().RegistryStr(), err)
		}
	}
	return &ImageError{Image: image, Reason: ReasonErrImagePull, Err: err}
}

func unauthorized(te *transport.Error) bool {
	if te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden {
		return true
	}
	for _, d := range te.Errors {
		if d.Code == transport.UnauthorizedErrorCode || d.Code == transport.DeniedErrorCode {
			return true
		}
	}
	return false
}

func notFound(te *transport.Error) bool {
	if te.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range te.Errors {
		if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
			return true
		}
	}
	return false
}

// digestRecorder is the registry transport: it hashes every manifest and blob fetched by
// digest as go-containerregistry reads it, and remembers mismatches, so that a registry serving
// wrong content is reported as ErrDigestMismatch (go-containerregistry's own check returns an
// untyped error).
type digestRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	bad  *DigestError
}

var digestPathRe = regexp.MustCompile(`/(manifests|blobs)/(sha256:[0-9a-f]{64})$`)

func (r *digestRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	m := digestPathRe.FindStringSubmatch(req.URL.Path)
	if m == nil {
		return resp, nil
	}
	what := "blob"
	if m[1] == "manifests" {
		what = "manifest"
	}
	resp.Body = &hashingBody{ReadCloser: resp.Body, h: sha256.New(), want: m[2], what: what, r: r}
	return resp, nil
}

func (r *digestRecorder) record(e *DigestError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad == nil {
		r.bad = e
	}
}

func (r *digestRecorder) mismatch() *DigestError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

type hashingBody struct {
	io.ReadCloser
	h          hash.Hash
	want, what string
	r          *digestRecorder
	done       bool
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		if got := "sha256:" + hex.EncodeToString(b.h.Sum(nil)); got != b.want {
			b.r.record(&DigestError{What: b.what, Want: b.want, Got: got})
		}
	}
	return n, err
}

// anonymous is a keychain that never has credentials (authn.DefaultKeychain would read the
// host's docker config).
type anonymous struct{}

func (anonymous) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }

var _ authn.Keychain = anonymous{}
var _ http.RoundTripper = (*digestRecorder)(nil)
