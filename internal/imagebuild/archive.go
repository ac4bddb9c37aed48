package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the image in the archive's index.json: containerd names the imported image
// after the first (ctr images import), the OCI spec's ref.name holds the tag.
const (
	ContainerdNameAnnotation = "io.containerd.image.name"
	RefNameAnnotation        = "org.opencontainers.image.ref.name"
)

// WriteArchive writes img named ref as an OCI image layout in a tar (oci-layout, index.json,
// blobs/sha256/...) at path, through a temporary file in the same folder so a reader never sees
// half an archive. The archive is reproducible (sorted, owner 0:0, mtime at the epoch) and keeps
// the image's manifest digest: containerd reports the digest Sizes prints.
//
// Equivalent to: `skopeo copy docker-daemon:REF oci-archive:PATH:REF`; load with
// `ctr -n k8s.io images import PATH`.
func WriteArchive(path, ref string, img v1.Image) (err error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("write image archive: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write image archive: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := writeLayoutTar(tmp, tag, img); err != nil {
		return fmt.Errorf("write image archive %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write image archive: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write image archive: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write image archive: %w", err)
	}
	return nil
}

func writeLayoutTar(w io.Writer, tag name.Tag, img v1.Image) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	add := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if r == nil {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if r == nil {
			return nil
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
		}
		return err
	}
	addBytes := func(name string, b []byte) error { return add(name, int64(len(b)), bytesReader(b)) }

	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: mt, Size: int64(len(raw)), Digest: digest,
		Annotations: map[string]string{ContainerdNameAnnotation: tag.Name(), RefNameAnnotation: tag.TagStr()},
	}}}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	if err := add("blobs/", 0, nil); err != nil {
		return err
	}
	if err := add("blobs/sha256/", 0, nil); err != nil {
		return err
	}
	// Blobs in digest order (a stable order; duplicates written once).
	blobs := map[string]func() error{}
	blobs[digest.Hex] = func() error { return addBytes("blobs/sha256/"+digest.Hex, raw) }
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	blobs[cfgName.Hex] = func() error { return addBytes("blobs/sha256/"+cfgName.Hex, cfg) }
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		blobs[d.Hex] = func() error {
			size, err := l.Size()
			if err != nil {
				return err
			}
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			defer rc.Close()
			return add("blobs/sha256/"+d.Hex, size, rc)
		}
	}
	for _, k := range sortedKeys(blobs) {
		if err := blobs[k](); err != nil {
			return err
		}
	}
	if err := addBytes("index.json", indexJSON); err != nil {
		return err
	}
	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
