package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

func TestQMPLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "qmp.log")
	l, err := openQMPLog(path, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	line := `{"execute":"query-status","id":"` + strings.Repeat("x", 60) + `"}`
	for range 100 {
		l.tap(qmp.Record{Time: time.Now(), Dir: qmp.Sent, Kind: qmp.KindCommand, Raw: []byte(line)})
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		st, _ := os.Stat(filepath.Join(dir, e.Name()))
		if st.Size() > 1000 {
			t.Errorf("%s is %d bytes, over the 1000 byte cap", e.Name(), st.Size())
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), st.Mode().Perm())
		}
	}
	if strings.Join(names, " ") != "qmp.log qmp.log.1 qmp.log.2" {
		t.Errorf("files %v, want qmp.log and two rotated ones", names)
	}
	b, _ := os.ReadFile(path)
	first := strings.SplitN(string(b), "\n", 2)[0]
	if f := strings.Fields(first); len(f) != 4 || f[1] != "wire" || f[2] != "cmd" || f[3] != line {
		t.Errorf("log line %q, want: <time> wire cmd <json>", first)
	}
	if _, err := time.Parse(time.RFC3339Nano, strings.Fields(first)[0]); err != nil {
		t.Errorf("timestamp: %v", err)
	}
	if w := l.feed.since(0, 0); len(w.items) != 100 {
		t.Errorf("feed kept %d entries, want 100", len(w.items))
	}
}
