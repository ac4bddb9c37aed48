package oci

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PullPolicy is KubeVirt's (and Kubernetes') imagePullPolicy.
type PullPolicy string

// Pull policies.
const (
	PullAlways       PullPolicy = "Always"       // resolve the reference at the source every time
	PullIfNotPresent PullPolicy = "IfNotPresent" // use the cached image when the reference is known
	PullNever        PullPolicy = "Never"        // use the cached image or fail
)

// layoutPrefix marks an OCI layout reference: "oci:/abs/dir", "oci:/abs/dir:tag",
// "oci:/abs/dir@sha256:<hex>". A registry reference cannot start with "oci:/" (a port is digits).
const layoutPrefix = "oci:"

// refNameAnnotation names a manifest inside an OCI layout's index.json.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// source is a parsed image reference.
type source struct {
	raw       string
	registry  name.Reference // nil for a layout
	layoutDir string
	layoutTag string
	pinned    *v1.Hash // the reference names a digest
}

// parseSource parses an image reference: a registry reference (name.ParseReference rules,
// "docker.io/library/" defaults) or an OCI layout reference.
func parseSource(image string) (*source, error) {
	if image == "" {
		return nil, fmt.Errorf("parse reference: empty: %w", ErrInvalidReference)
	}
	if rest, ok := strings.CutPrefix(image, layoutPrefix); ok {
		return parseLayout(image, rest)
	}
	ref, err := name.ParseReference(image) // "repo" means "index.docker.io/library/repo:latest"
	if err != nil {
		return nil, fmt.Errorf("parse reference %q: %w: %w", image, ErrInvalidReference, err)
	}
	s := &source{raw: image, registry: ref}
	if d, ok := ref.(name.Digest); ok {
		h, err := v1.NewHash(d.DigestStr())
		if err != nil {
			return nil, fmt.Errorf("parse reference %q: %w: %w", image, ErrInvalidReference, err)
		}
		s.pinned = &h
	}
	return s, nil
}

func parseLayout(image, rest string) (*source, error) {
	s := &source{raw: image}
	dir := rest
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		h, err := v1.NewHash(rest[i+1:])
		if err != nil {
			return nil, fmt.Errorf("parse reference %q: %w: %w", image, ErrInvalidReference, err)
		}
		dir, s.pinned = rest[:i], &h
	} else if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		dir, s.layoutTag = rest[:i], rest[i+1:]
		if s.layoutTag == "" {
			return nil, fmt.Errorf("parse reference %q: empty tag: %w", image, ErrInvalidReference)
		}
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, fmt.Errorf("parse reference %q: layout folder must be an absolute clean path: %w", image, ErrInvalidReference)
	}
	s.layoutDir = dir
	return s, nil
}

// key identifies the reference in the refs records, independent of how it was spelled.
func (s *source) key(p v1.Platform) string {
	var k string
	switch {
	case s.registry != nil:
		k = s.registry.Name() // fully qualified: index.docker.io/library/x:latest
	case s.pinned != nil:
		k = layoutPrefix + s.layoutDir + "@" + s.pinned.String()
	default:
		k = layoutPrefix + s.layoutDir + ":" + s.layoutTag
	}
	return k + " " + p.String()
}

// DefaultPullPolicy is Kubernetes' default for an image reference: Always for ":latest" or no
// tag (and no digest), IfNotPresent otherwise. An unparsable reference gets IfNotPresent (the
// pull then fails with ReasonInvalidImageName).
func DefaultPullPolicy(image string) PullPolicy {
	s, err := parseSource(image)
	if err != nil || s.pinned != nil {
		return PullIfNotPresent
	}
	if s.registry != nil {
		if t, ok := s.registry.(name.Tag); ok && t.TagStr() == "latest" {
			return PullAlways
		}
		return PullIfNotPresent
	}
	if s.layoutTag == "" || s.layoutTag == "latest" {
		return PullAlways
	}
	return PullIfNotPresent
}

// CheckReference reports whether image parses as a registry or OCI layout reference (the
// error wraps ErrInvalidReference).
func CheckReference(image string) error {
	_, err := parseSource(image)
	return err
}

// Pin returns image's reference to exactly digest ("repo@sha256:…", "oci:/dir@sha256:…"), for
// pulling the same content again later whatever the tag points to then.
func Pin(image, digest string) (string, error) {
	s, err := parseSource(image)
	if err != nil {
		return "", err
	}
	if _, err := v1.NewHash(digest); err != nil {
		return "", fmt.Errorf("pin %q to %q: %w: %w", image, digest, ErrInvalidReference, err)
	}
	if s.registry != nil {
		return s.registry.Context().Digest(digest).Name(), nil
	}
	return layoutPrefix + s.layoutDir + "@" + digest, nil
}
