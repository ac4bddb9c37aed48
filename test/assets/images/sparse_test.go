package images

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// TestSparseLayer: archive/tar reads the entry back as the sparse file it says.
func TestSparseLayer(t *testing.T) {
	l, err := SparseLayer("/disk/disk.img", 10<<30, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name != "disk/disk.img" {
			continue
		}
		if h.Size != 10<<30 {
			t.Errorf("size %d", h.Size)
		}
		head := make([]byte, 8)
		if _, err := io.ReadFull(tr, head); err != nil || !bytes.Equal(head, []byte("hello\x00\x00\x00")) {
			t.Errorf("head %q %v", head, err)
		}
	}
	if len(names) != 2 || names[0] != "disk/" {
		t.Errorf("entries %v", names)
	}
	if c, _ := l.Compressed(); c != nil {
		n, _ := io.Copy(io.Discard, c)
		if n > 1<<20 {
			t.Errorf("layer is %d bytes", n)
		}
	}
}
