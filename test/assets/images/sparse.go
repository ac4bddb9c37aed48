package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// SparseLayer is a gzip tar layer holding one file of size bytes at path (absolute, its parent
// folders before it) that is all hole but for data at offset 0: a PAX 1.0 sparse entry (what
// `tar --sparse --format=pax` writes), so the layer stays small whatever size says. Go's
// archive/tar reads such entries but does not write them: the extended header is built here.
func SparseLayer(path string, size int64, data []byte) (v1.Layer, error) {
	if int64(len(data)) > size {
		return nil, fmt.Errorf("sparse layer: %d bytes of data in a %d-byte file", len(data), size)
	}
	name := strings.TrimPrefix(path, "/")
	dir, file := name[:strings.LastIndex(name, "/")+1], name[strings.LastIndex(name, "/")+1:]
	var records strings.Builder
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", name}, {"GNU.sparse.realsize", strconv.FormatInt(size, 10)}} {
		records.WriteString(paxRecord(kv[0], kv[1]))
	}
	spMap := fmt.Sprintf("1\n0\n%d\n", len(data))
	body := append([]byte(spMap), make([]byte, 512-len(spMap))...)
	body = append(body, data...)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for d := ""; ; {
		i := strings.Index(name[len(d):], "/")
		if i < 0 {
			break
		}
		d = name[:len(d)+i+1]
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatUSTAR}); err != nil {
			return nil, fmt.Errorf("sparse layer: %w", err)
		}
	}
	xhdr := buf.Len()
	// The extended header, first as a regular file (the writer refuses TypeXHeader)...
	if err := tw.WriteHeader(&tar.Header{Name: dir + "PaxHeaders.0/" + file, Typeflag: tar.TypeReg, Mode: 0o644,
		Size: int64(records.Len()), Format: tar.FormatUSTAR}); err != nil {
		return nil, fmt.Errorf("sparse layer: %w", err)
	}
	if _, err := io.WriteString(tw, records.String()); err != nil {
		return nil, fmt.Errorf("sparse layer: %w", err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: dir + "GNUSparseFile.0/" + file, Typeflag: tar.TypeReg, Mode: 0o644,
		Uid: 107, Gid: 107, Size: int64(len(body)), Format: tar.FormatUSTAR}); err != nil {
		return nil, fmt.Errorf("sparse layer: %w", err)
	}
	if _, err := tw.Write(body); err != nil {
		return nil, fmt.Errorf("sparse layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("sparse layer: %w", err)
	}
	// ...then retyped 'x', with its checksum recomputed.
	b := buf.Bytes()
	h := b[xhdr : xhdr+512]
	h[156] = tar.TypeXHeader
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, fmt.Errorf("sparse layer: %w", err)
	}
	return l, nil
}

// paxRecord is one "LEN KEY=VALUE\n" record; LEN counts itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for len(strconv.Itoa(n))+len(k)+len(v)+3 != n {
		n = len(strconv.Itoa(n)) + len(k) + len(v) + 3
	}
	return strconv.Itoa(n) + " " + k + "=" + v + "\n"
}
