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
   vt0:    1200      10    3    2    0     0          0         0      684       6    4    1    0     0       0          0
`)
	c, err := parseNetDev(b, "vt0")
	if err != nil {
		t.Fatal(err)
	}
	want := netDev{RxBytes: 1200, RxPackets: 10, RxErrors: 3, RxDropped: 2, TxBytes: 684, TxPackets: 6, TxErrors: 4, TxDropped: 1}
	if c != want {
		t.Errorf("parseNetDev = %+v, want %+v", c, want)
	}
	if _, err := parseNetDev(b, "eth9"); err == nil {
		t.Error("missing interface found")
	}
}

func TestParseStatFaults(t *testing.T) {
	// Fields 10 (minflt) and 12 (majflt); 11 and 13 are the children's and must be ignored.
	line := []byte("77 (qemu-system-x86) S 1 77 77 0 -1 4194560 51234 999 17 888 40 10 0 0 20 0 5 0 100 1000 200")
	c, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := taskStat{MinFlt: 51234, MajFlt: 17, User: 400_000_000, System: 100_000_000}
	if c != want {
		t.Errorf("parseStat = %+v, want %+v", c, want)
	}
	if _, err := parseStat([]byte("1 (x) S 1 1 1 0 -1 0 z 0 0 0 1 1 0")); err == nil {
		t.Error("non-numeric minflt parsed")
	}
}

func TestParseSchedstat(t *testing.T) {
	d, err := parseSchedstat([]byte("220754380 38910104 1094\n"))
	if err != nil || d != 38910104 {
		t.Errorf("parseSchedstat = %d, %v; want 38910104", d, err)
	}
	for _, bad := range []string{"", "123", "1 x 3"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("parseSchedstat(%q) parsed", bad)
		}
	}
}

func TestParseSchedWait(t *testing.T) {
	// Excerpts of /proc/<pid>/task/<tid>/sched: a kernel with CONFIG_SCHEDSTATS (both names
	// libvirt accepts) and one without (this machine's: no wait_sum line at all).
	withStats := "CPU 0/TCG (1234, #threads: 5)\n" +
		"-------------------------------------------------------------------\n" +
		"se.exec_start                                :      31413822.506376\n" +
		"se.statistics.wait_start                     :             0.000000\n" +
		"se.statistics.wait_sum                       :          1234.567891\n" +
		"se.statistics.wait_count                     :                  100\n"
	newName := "se.sum_exec_runtime : 220.754380\nse.wait_sum : 0.250000\n"
	without := "se.exec_start : 31413822.506376\nse.sum_exec_runtime : 220.754380\nnr_switches : 1094\n"
	tests := []struct {
		in     string
		ns     uint64
		wantOK bool
	}{
		{withStats, 1_234_567_891, true},
		{newName, 250_000, true},
		{without, 0, false},
	}
	for _, tt := range tests {
		ns, ok, err := parseSchedWait([]byte(tt.in))
		if err != nil || ok != tt.wantOK || ns != tt.ns {
			t.Errorf("parseSchedWait = %d, %v, %v; want %d, %v", ns, ok, err, tt.ns, tt.wantOK)
		}
	}
	if _, _, err := parseSchedWait([]byte("se.wait_sum : lots\n")); err == nil {
		t.Error("non-numeric wait_sum parsed")
	}
}
