package cloudinit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzISORoundTrip: any user data, network data, instance id, hostname and SSH key either make
// NewConfig fail with ErrInvalid, or give an ISO that ReadISO reads back with the kind's label
// and byte-identical files (Rock Ridge names; Joliet too for NoCloud), leaving only the ISO
// in its folder.
//
//	go test ./storage/cloudinit -run '^$' -fuzz FuzzISORoundTrip -fuzztime 60s
func FuzzISORoundTrip(f *testing.F) {
	f.Add(false, false, []byte("#cloud-config\nruncmd: [echo hi]\n"), []byte("version: 2\n"), "vm1.ns", "vm1", "ssh-ed25519 AAAA")
	f.Add(true, true, []byte{0, 0xff, 0xfe, '\n'}, []byte{}, "i-1", "", "")
	f.Add(false, true, bytes.Repeat([]byte{0}, 2048), []byte("\x00\x01"), "a", "h", "k\"ey\n")
	f.Add(true, false, []byte(""), []byte("{\"links\": []}"), "0", "-bad", "")
	f.Add(false, false, bytes.Repeat([]byte("x"), 4097), []byte(nil), "a/b", "", "")
	f.Fuzz(func(t *testing.T, configDrive, b64 bool, user, network []byte, id, host, key string) {
		kind := NoCloud
		if configDrive {
			kind = ConfigDrive
		}
		var src Source
		if b64 {
			src = Source{UserDataBase64: enc(user), NetworkDataBase64: enc(network)}
		} else {
			src = Source{UserData: string(user), NetworkData: string(network)}
		}
		meta := MetaData{InstanceID: id, Hostname: host}
		if key != "" {
			meta.PublicKeys = map[string]string{"k": key}
		}
		c, err := NewConfig(kind, src, meta)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("NewConfig: %v is not ErrInvalid", err)
			}
			return
		}
		want, err := c.Files()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		p := filepath.Join(dir, "cloudinit.iso")
		if err := WriteISO(p, c); err != nil {
			t.Fatalf("WriteISO of a valid config: %v", err)
		}
		label, got, err := ReadISO(p)
		if err != nil {
			t.Fatalf("ReadISO: %v", err)
		}
		if label != c.Label() {
			t.Errorf("label %q, want %q", label, c.Label())
		}
		if len(got) != len(want) {
			t.Errorf("files %v, want %d files", keys(got), len(want))
		}
		for n, w := range want {
			if g, ok := got[n]; !ok || !bytes.Equal(g, w) {
				t.Errorf("%s: %d bytes read back (present %v), want %d bytes", n, len(g), ok, len(w))
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("%d entries next to the ISO, want only it", len(ents))
		}
	})
}

func enc(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(b)
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
