package imagebuild

import (
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ImageSizes are an image's manifest digest and its sizes: compressed (what a registry or a
// tarball stores: layers, config, manifest) and uncompressed (the unpacked layers' tar bytes).
type ImageSizes struct {
	Digest                   v1.Hash
	Compressed, Uncompressed int64
}

// Sizes measures img.
func Sizes(img v1.Image) (ImageSizes, error) {
	var s ImageSizes
	var err error
	if s.Digest, err = img.Digest(); err != nil {
		return s, fmt.Errorf("image digest: %w", err)
	}
	m, err := img.Manifest()
	if err != nil {
		return s, fmt.Errorf("image manifest: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return s, fmt.Errorf("image manifest: %w", err)
	}
	s.Compressed = int64(len(raw)) + m.Config.Size
	layers, err := img.Layers()
	if err != nil {
		return s, fmt.Errorf("image layers: %w", err)
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return s, fmt.Errorf("layer size: %w", err)
		}
		s.Compressed += n
		rc, err := l.Uncompressed()
		if err != nil {
			return s, fmt.Errorf("layer: %w", err)
		}
		u, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return s, fmt.Errorf("layer: %w", err)
		}
		s.Uncompressed += u
	}
	return s, nil
}
