package launcher

import "testing"

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as QEMU's threads have ("CPU 0/TCG").
	line := []byte("1234 (CPU 0/TCG) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 3 0 100 1000 200 18446744073709551615")
	c, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if c.User != 2_500_000_000 || c.System != 300_000_000 {
		t.Errorf("parseStat = %+v, want 2.5 s user, 0.3 s system", c)
	}
	if _, err := parseStat([]byte("garbage")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParseSmapsRollup(t *testing.T) {
	b := []byte("00400000-7fff [rollup]\nRss:               12345 kB\nPss:                6789 kB\nPss_Anon:           100 kB\n")
	m, err := parseSmapsRollup(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 12345<<10 || m.PSS != 6789<<10 {
		t.Errorf("parseSmapsRollup = %+v", m)
	}
	if _, err := parseSmapsRollup([]byte("nothing")); err == nil {
		t.Error("no Rss/Pss parsed")
	}
}

func TestParseNetDev(t *testing.T) {
	b := []byte(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
   vt0:    1200      10    0    2    0     0          0         0      684       6    0    1    0     0       0          0
`)
	c, err := parseNetDev(b, "vt0")
	if err != nil {
		t.Fatal(err)
	}
	want := netDev{RxBytes: 1200, RxPackets: 10, RxDropped: 2, TxBytes: 684, TxPackets: 6, TxDropped: 1}
	if c != want {
		t.Errorf("parseNetDev = %+v, want %+v", c, want)
	}
	if _, err := parseNetDev(b, "eth9"); err == nil {
		t.Error("missing interface found")
	}
}
