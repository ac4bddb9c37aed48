package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// FuzzApplyTar unpacks layers decoded from the fuzzer's bytes (see fuzzLayers; raw: the bytes
// are one tar stream as they are) into rootfs/ next to a sentinel file, then requires: nothing
// outside rootfs/ was created or removed; the tree holds only folders and regular files (no
// symlink, device, fifo); the files' sizes stay within the limit; and, for decoded layers, the
// tree is exactly what an independent model of the OCI layer rules (whiteouts, opaque folders,
// hard links as copies, skipped types) predicts. An unpack error must be ErrInvalidImage or
// ErrTooLarge.
//
//	go test ./storage/oci -run '^$' -fuzz FuzzApplyTar -fuzztime 60s
func FuzzApplyTar(f *testing.F) {
	for _, s := range []string{
		"0d:a\n0f:a/b=hello\n", "0f:x=1\n|0w:.wh.x\n", "0f:d/x=1\n0f:d/y=2\n|0f:d/z=3\n0o:d/.wh..wh..opq\n",
		"0f:../../etc/passwd=root\n", "0s:l>/etc\n0f:l/x=y\n", "0f:a=1\n0h:b>a\n", "0c:dev\n0p:fifo\n",
		"0w:.wh...\n", "0w:.wh..\n", "0w:d/.wh.\n", "0f:d/e/f=1\n|0f:d/e/g=2\n0o:d/.wh..wh..opq\n",
		"0h:b>b\n", "0f:a=12345678\n0h:b>a\n0h:c>a\n0h:d>a\n", "0w:.wh..wh.plnk\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("not a tar"), true)
	f.Fuzz(func(t *testing.T, data []byte, raw bool) {
		const limit = 64 // bytes of files; the stream (512-byte tar headers) may be larger
		outer := t.TempDir()
		t.Cleanup(func() { _ = forceRemoveAll(outer) })
		if err := os.WriteFile(filepath.Join(outer, "sentinel"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		st := &unpackState{root: filepath.Join(outer, rootfsDir), limit: 1 << 20, files: limit, entries: 32,
			meta: imageMeta{Skipped: map[string]string{}}}
		if err := os.Mkdir(st.root, 0o755); err != nil {
			t.Fatal(err)
		}
		var layers [][]fuzzEntry
		var streams [][]byte
		if raw {
			streams = [][]byte{data}
		} else {
			layers = fuzzLayers(data)
			for i, l := range layers {
				var b []byte
				b, layers[i] = tarOf(l)
				streams = append(streams, b)
			}
		}
		var err error
		for _, s := range streams {
			lim := &limitReader{r: bytes.NewReader(s), left: st.limit}
			if err = st.applyTar(context.Background(), lim); err != nil {
				break
			}
			st.limit = lim.left
		}
		if err != nil && !errors.Is(err, ErrInvalidImage) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("unpack: %v is neither ErrInvalidImage nor ErrTooLarge", err)
		}
		if b, rerr := os.ReadFile(filepath.Join(outer, "sentinel")); rerr != nil || string(b) != "keep" {
			t.Fatalf("the sentinel next to rootfs/ is gone or changed (%v)", rerr)
		}
		if ents, _ := os.ReadDir(outer); len(ents) != 2 {
			t.Fatalf("%d entries next to rootfs/ (want rootfs and sentinel): %v", len(ents), ents)
		}
		got := walkTree(t, st.root)
		var total int64
		for _, c := range got {
			total += int64(len(c))
		}
		if total > limit {
			t.Fatalf("%d bytes of files from a %d-byte limit", total, limit)
		}
		if raw || err != nil {
			return
		}
		want := modelLayers(layers)
		if !equalTrees(got, want) {
			t.Fatalf("layers %q\nunpacked to %s\nmodel says  %s", data, showTree(got), showTree(want))
		}
	})
}

// fuzzEntry is one tar entry: typ is d(ir) f(ile) h(ard link) s(ymlink) c(har device) p(fifo);
// whiteouts are files named .wh.*.
type fuzzEntry struct {
	typ        byte
	name, link string
	data       string
}

// fuzzLayers decodes "|"-separated layers of lines "<any>T:NAME[=DATA|>LINK]".
func fuzzLayers(data []byte) [][]fuzzEntry {
	var layers [][]fuzzEntry
	for _, l := range strings.Split(string(data), "|") {
		var es []fuzzEntry
		for _, line := range strings.Split(l, "\n") {
			if len(line) < 3 || line[2] != ':' || len(es) >= 16 {
				continue
			}
			e := fuzzEntry{typ: line[1], name: line[3:]}
			if n, d, ok := strings.Cut(e.name, "="); ok {
				e.name, e.data = n, d
			} else if n, t, ok := strings.Cut(e.name, ">"); ok {
				e.name, e.link = n, t
			}
			es = append(es, e)
		}
		layers = append(layers, es)
	}
	return layers
}

// tarOf writes es as a tar stream and returns it with the entries it holds (tar refuses some
// headers, e.g. a regular file whose name ends in "/").
func tarOf(es []fuzzEntry) ([]byte, []fuzzEntry) {
	var b bytes.Buffer
	var written []fuzzEntry
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Mode: 0o644, Format: tar.FormatPAX}
		switch e.typ {
		case 'd':
			h.Typeflag = tar.TypeDir
		case 'h':
			h.Typeflag = tar.TypeLink
		case 's':
			h.Typeflag = tar.TypeSymlink
		case 'c':
			h.Typeflag = tar.TypeChar
		case 'p':
			h.Typeflag = tar.TypeFifo
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if tw.WriteHeader(h) != nil {
			continue // nothing written
		}
		if h.Typeflag != tar.TypeReg {
			e.data = "" // nothing to write: the model must not see any
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			panic(err) // h.Size is len(e.data)
		}
		written = append(written, e)
	}
	_ = tw.Close()
	return b.Bytes(), written
}

// walkTree returns every path under root ("dir/" for folders, file contents otherwise),
// failing on anything but folders and regular files.
func walkTree(t *testing.T, root string) map[string]string {
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t.Fatalf("symlink %s created", rel)
		case d.IsDir():
			tree[filepath.ToSlash(rel)+"/"] = ""
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tree[filepath.ToSlash(rel)] = string(b)
		default:
			t.Fatalf("%s is a %v, not a folder or a regular file", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// modelLayers applies the OCI layer rules to a map: lower layers' entries hidden by a
// whiteout (.wh.NAME) or an opaque folder (.wh..wh..opq: the folder keeps only this layer's
// entries), later entries replacing earlier ones (a file in a folder's way is removed),
// hard links copying their target, symlinks/devices/fifos removing what was at their path.
func modelLayers(layers [][]fuzzEntry) map[string]string {
	tree := map[string]string{}
	removeAt := func(p string) {
		for k := range tree {
			if k == p || k == p+"/" || strings.HasPrefix(k, p+"/") {
				delete(tree, k)
			}
		}
	}
	mkdirs := func(p string) {
		cur := ""
		for _, part := range strings.Split(p, "/") {
			cur = path.Join(cur, part)
			if _, isDir := tree[cur+"/"]; !isDir {
				removeAt(cur)
				tree[cur+"/"] = ""
			}
		}
	}
	for _, es := range layers {
		this := map[string]bool{} // paths (and their parents) this layer wrote
		var opaque []string
		for _, e := range es {
			name, ok := cleanName(e.name)
			if !ok {
				continue
			}
			dir, base := path.Split(name)
			dir = strings.TrimSuffix(dir, "/")
			switch {
			case base == whiteoutOpaque:
				opaque = append(opaque, dir)
				continue
			case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
				continue // other aufs metadata: ignored
			case strings.HasPrefix(base, whiteoutPrefix):
				removeAt(path.Join(dir, base[len(whiteoutPrefix):]))
				continue
			}
			for p := name; p != "."; p = path.Dir(p) {
				this[p] = true
			}
			switch e.typ {
			case 'd':
				mkdirs(name)
			case 'h':
				target, _ := cleanName(e.link)
				content := tree[target]
				if dir != "" {
					mkdirs(dir)
				}
				removeAt(name)
				tree[name] = content
			case 's', 'c', 'p':
				removeAt(name)
			default:
				if dir != "" {
					mkdirs(dir)
				}
				removeAt(name)
				tree[name] = e.data
			}
		}
		for _, d := range opaque {
			for k := range tree {
				p := strings.TrimSuffix(k, "/")
				if (d == "" || strings.HasPrefix(p, d+"/")) && !this[p] {
					delete(tree, k)
				}
			}
		}
	}
	return tree
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func showTree(t map[string]string) string {
	var ks []string
	for k, v := range t {
		if !strings.HasSuffix(k, "/") {
			k += "=" + v
		}
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}
