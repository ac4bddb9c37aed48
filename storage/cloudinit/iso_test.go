package cloudinit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/test/prereq"
)

func testConfigs(t *testing.T) []*Config {
	t.Helper()
	var out []*Config
	for _, k := range []Kind{NoCloud, ConfigDrive} {
		c, err := NewConfig(k, Source{UserData: "#cloud-config\nruncmd: [echo hi]\n", NetworkData: "version: 2\n"},
			MetaData{InstanceID: "vm1.ns", Hostname: "vm1"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestWriteISO: the ISO reads back (Rock Ridge names) with the right label and files; a
// rewrite replaces it atomically and leaves no temporary files.
func TestWriteISO(t *testing.T) {
	for _, c := range testConfigs(t) {
		t.Run(string(c.Kind), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "cloudinit.iso")
			want, err := c.Files()
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second write replaces the first
				if err := WriteISO(p, c); err != nil {
					t.Fatal(err)
				}
			}
			label, files, err := ReadISO(p)
			if err != nil {
				t.Fatal(err)
			}
			if label != c.Label() || !reflect.DeepEqual(files, want) {
				t.Errorf("read back label %q files %q\nwant %q %q", label, files, c.Label(), want)
			}
			fi, err := os.Stat(p)
			if err != nil || fi.Mode().Perm() != 0o444 || fi.Size()%sectorSize != 0 {
				t.Errorf("iso: %v, %v", fi, err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("folder holds %d entries, want only the iso", len(ents))
			}
		})
	}
}

// TestISOWithIsoinfo reads the ISOs with an independent implementation (genisoimage's isoinfo):
// Rock Ridge and Joliet names, and the volume label.
func TestISOWithIsoinfo(t *testing.T) {
	if _, err := exec.LookPath("isoinfo"); err != nil {
		prereq.Missing(t, "isoinfo not on PATH (apt-get install genisoimage)")
	}
	for _, c := range testConfigs(t) {
		t.Run(string(c.Kind), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "ci.iso")
			if err := WriteISO(p, c); err != nil {
				t.Fatal(err)
			}
			want, err := c.Files()
			if err != nil {
				t.Fatal(err)
			}
			// Joliet only for NoCloud: see build.
			joliet := c.Kind == NoCloud
			pvd := isoinfo(t, "-d", "-i", p)
			if !strings.Contains(pvd, "Volume id: "+c.Label()+"\n") || !strings.Contains(pvd, "Rock Ridge signatures version 1 found") ||
				strings.Contains(pvd, "Joliet with UCS level 3 found") != joliet {
				t.Errorf("isoinfo -d (want joliet %v):\n%s", joliet, pvd)
			}
			var size int64
			for _, l := range strings.Split(pvd, "\n") {
				if v, ok := strings.CutPrefix(l, "Volume size is: "); ok {
					if _, err := fmt.Sscan(v, &size); err != nil {
						t.Fatalf("parse volume size %q: %v", v, err)
					}
				}
			}
			if fi, err := os.Stat(p); err != nil || size == 0 || fi.Size() < size*sectorSize {
				t.Errorf("file size %v (%v) shorter than the volume's %d sectors", fi.Size(), err, size)
			}
			exts := []string{"-R"}
			if joliet {
				exts = append(exts, "-J")
			}
			for _, ext := range exts {
				for name, content := range want {
					got := isoinfo(t, ext, "-i", p, "-x", "/"+name)
					if !bytes.Equal([]byte(got), content) {
						t.Errorf("isoinfo %s -x /%s = %q, want %q", ext, name, got, content)
					}
				}
			}
		})
	}
}

func isoinfo(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("isoinfo", args...).Output()
	if err != nil {
		t.Fatalf("isoinfo %v: %v", args, err)
	}
	return string(out)
}
