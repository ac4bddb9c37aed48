package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Layer writes the planned entries into a gzip tar layer: owner 0:0 without names, mtime for
// every entry, the host file's content for files (read once, here). The tar is held in memory
// (vmlet's images are tens of MB).
//
// Equivalent to: `tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@EPOCH -c`.
func Layer(entries []Entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Name, Mode: tarMode(e.Mode), ModTime: mtime, Format: tar.FormatPAX}
		var content []byte
		switch e.Type {
		case TypeDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.Name+"/"
		case TypeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
		case TypeFile:
			content = e.Content
			if e.Source != "" {
				b, err := os.ReadFile(e.Source)
				if err != nil {
					return nil, fmt.Errorf("read layer file: %w", err)
				}
				content = b
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(content))
		default:
			return nil, fmt.Errorf("write layer: entry %s has unknown type %d", e.Name, e.Type)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write tar header %s: %w", e.Name, err)
		}
		if _, err := tw.Write(content); err != nil {
			return nil, fmt.Errorf("write tar entry %s: %w", e.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	return l, nil
}

// tarMode is m's permission bits and sticky bit as tar stores them.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
