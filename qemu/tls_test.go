package qemu

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/pki"
)

// tlsDir writes a QEMU creds folder for node with a certificate from issuer; ca-cert.pem
// holds issuer's CA plus those of also. (QEMU checks its own certificate against ca-cert.pem
// when it loads the folder, so a peer with a foreign certificate must trust its own CA too;
// also lets such a peer trust the other side, so that only one side refuses.)
func tlsDir(t testing.TB, issuer *pki.CA, node string, also ...*pki.CA) string {
	t.Helper()
	c, err := issuer.Issue(pki.Node{Name: node, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, pki.IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(shortTempDir(t, "tls"), "creds")
	if err := pki.WriteQEMUCreds(dir, issuer, c, pki.Owner{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	if len(also) > 0 {
		bundle := slices.Clone(issuer.CertPEM)
		for _, ca := range also {
			bundle = append(bundle, ca.CertPEM...)
		}
		if err := os.WriteFile(filepath.Join(dir, pki.QEMUCACert), bundle, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func newTestCA(t testing.TB) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// tlsID is the creds object id the tests use on both sides.
const tlsID = "tls0"

// TestTLSMigrate moves a 512 MiB guest holding 192 MiB of random data (so the stream is not
// mostly zero pages) along a chain of six migrations over unix sockets, alternating plaintext
// and TLS (the source's client certificate for node-a, the target's server certificate for
// node-b, one CA, verify-peer both ways, tls-hostname node-b). Each hop checks the guest and
// its memory arrived; the median throughput of each kind is logged. A VM that arrived over TLS
// still has tls-creds set: its next plaintext hop needs ClearTLS, its next TLS hop replaces
// the server creds object by a client one under the same id. A last hop runs TLS over two
// multifd channels.
func TestTLSMigrate(t *testing.T) {
	ca := newTestCA(t)
	clientDir, serverDir := tlsDir(t, ca, "node-a"), tlsDir(t, ca, "node-b")
	cur, _, token := prepareGuest(t, guestOpts{memoryMiB: 512})
	// 16 MiB of /dev/urandom repeated 12 times: not zero pages (QEMU sends every page of it),
	// and ten times faster to make than 192 MiB from urandom, which under TCG on a loaded host
	// outlived the guest-exec deadline (CI: 60 s).
	cur.sh(t, "head -c 16m /dev/urandom > /tmp/r && for i in 1 2 3 4 5 6 7 8 9 10 11 12; do cat /tmp/r; done > /tmp/fill && rm /tmp/r")
	rate := func(m MigrationInfo) float64 { return float64(m.RAMTransferred) / (1 << 20) / m.TotalTime.Seconds() }
	rates := map[bool][]float64{}
	for hop := range 6 {
		tls := hop%2 == 1
		next := startTarget(t, cur)
		ctx := ctxT(t, opTimeout)
		p := MigrationParams{MaxBandwidth: 10 << 30, ClearTLS: true}
		if tls {
			if err := cur.AddTLSCreds(ctx, tlsID, clientDir, TLSClient); err != nil {
				t.Fatal(err)
			}
			if err := next.AddTLSCreds(ctx, tlsID, serverDir, TLSServer); err != nil {
				t.Fatal(err)
			}
			p = MigrationParams{MaxBandwidth: 10 << 30, TLSCreds: tlsID, TLSHostname: "node-b"}
		}
		up := cur.guestUptime(t)
		res := migration{params: p}.run(t, cur, next)
		afterMigration(t, cur, next, up, token)
		rates[tls] = append(rates[tls], rate(res.src))
		t.Logf("hop %d tls=%v: %.0f MiB/s (%d MiB in %s, downtime %s)", hop, tls, rate(res.src), res.src.RAMTransferred>>20, res.src.TotalTime, res.src.Downtime)
		cur.stop(t) // quit already; frees its memory before the next hop
		cur = next
	}
	// One more hop over TLS with two multifd channels (a TLS session each, the same creds).
	next := startTarget(t, cur)
	ctx := ctxT(t, opTimeout)
	if err := cur.AddTLSCreds(ctx, tlsID, clientDir, TLSClient); err != nil {
		t.Fatal(err)
	}
	if err := next.AddTLSCreds(ctx, tlsID, serverDir, TLSServer); err != nil {
		t.Fatal(err)
	}
	up := cur.guestUptime(t)
	res := migration{
		caps:   MigrationCaps{Multifd: true},
		params: MigrationParams{MaxBandwidth: 10 << 30, MultifdChannels: 2, TLSCreds: tlsID, TLSHostname: "node-b"},
	}.run(t, cur, next)
	afterMigration(t, cur, next, up, token)
	t.Logf("tls with 2 multifd channels: %.0f MiB/s (%d MiB in %s, downtime %s)", rate(res.src), res.src.RAMTransferred>>20, res.src.TotalTime, res.src.Downtime)
	cur = next
	if got := cur.sh(t, "wc -c < /tmp/fill"); got != "201326592" {
		t.Errorf("random fill after the chain is %q bytes", got)
	}
	median := func(v []float64) string {
		slices.Sort(v)
		return fmt.Sprintf("%.0f MiB/s (runs %.0f)", v[len(v)/2], v)
	}
	t.Logf("throughput, 512 MiB guest with 192 MiB random, median of 3: plaintext %s, tls %s", median(rates[false]), median(rates[true]))
}

// TestTLSMigrateRefused tries TLS migrations that must fail, all from one source: the target
// presents a certificate of another CA (the source refuses it), the source presents one (the
// target refuses it), the target's certificate names another host, the target expects
// plaintext. The source keeps running the guest after each, and finally migrates over TLS to a
// proper target.
func TestTLSMigrateRefused(t *testing.T) {
	ca, foreign := newTestCA(t), newTestCA(t)
	src, _, token := prepareGuest(t, guestOpts{})
	goodClient := tlsDir(t, ca, "node-a")
	goodServer := tlsDir(t, ca, "node-b")
	for _, tc := range []struct {
		name           string
		client, server string // creds folders; server "" = plaintext target
		hostname       string
		// targetRefuses: the target fails the handshake itself; QEMU 7.2 then only logs it
		// and keeps listening (inmigrate). Otherwise its handshake completed and it read the
		// broken channel (or TLS bytes) as a migration stream, and exits with status 1.
		targetRefuses bool
	}{
		// The foreign peer trusts both CAs, so only the other side refuses.
		{name: "target certificate from another ca", client: goodClient, server: tlsDir(t, foreign, "node-b", ca), hostname: "node-b"},
		{name: "source certificate from another ca", client: tlsDir(t, foreign, "node-a", ca), server: goodServer, hostname: "node-b", targetRefuses: true},
		{name: "target certificate for another host", client: goodClient, server: goodServer, hostname: "node-c"},
		{name: "plaintext target", client: goodClient, hostname: "node-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := startTarget(t, src)
			defer dst.stop(t)
			ctx := ctxT(t, opTimeout)
			for _, vm := range []*testVM{src, dst} {
				if err := vm.SetMigrationCaps(ctx, MigrationCaps{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.server != "" {
				if err := dst.AddTLSCreds(ctx, tlsID, tc.server, TLSServer); err != nil {
					t.Fatal(err)
				}
				if err := dst.SetMigrationParams(ctx, MigrationParams{TLSCreds: tlsID}); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.AddTLSCreds(ctx, tlsID, tc.client, TLSClient); err != nil {
				t.Fatal(err)
			}
			if err := src.SetMigrationParams(ctx, MigrationParams{TLSCreds: tlsID, TLSHostname: tc.hostname}); err != nil {
				t.Fatal(err)
			}
			uri := "unix:" + filepath.Join(shortTempDir(t, "vm"), "mig.sock")
			if err := dst.MigrateIncoming(ctx, uri); err != nil {
				t.Fatal(err)
			}
			if err := src.Migrate(ctx, uri); err != nil {
				t.Fatal(err)
			}
			_, err := src.WaitMigration(ctx, nil)
			var me *MigrationError
			if !errors.As(err, &me) || me.Status != "failed" || !errors.Is(err, ErrMigrationFailed) {
				t.Fatalf("WaitMigration = %v, want a failed MigrationError", err)
			}
			t.Logf("source: %v", err)
			if st, err := src.Status(ctx); err != nil || st.Status != "running" {
				t.Fatalf("source status after the refused migration = %+v, %v; want running", st, err)
			}
			if tc.targetRefuses {
				if st, err := dst.Status(ctx); err != nil || st.Status != "inmigrate" {
					t.Errorf("target after refusing the source = %+v, %v; want inmigrate", st, err)
				}
				for _, l := range strings.Split(dst.logs.String(), "\n") {
					if strings.Contains(l, "qemu-system") {
						t.Logf("target: %s", l)
					}
				}
			} else if exit := dst.waitExit(t); exit.Reason != ExitCrash || exit.Code != 1 {
				t.Errorf("target exit = %+v, want status 1", exit)
			} else {
				t.Logf("target: %s", strings.TrimSpace(exit.Stderr))
			}
		})
	}
	if got := src.sh(t, "cat /tmp/token"); got != token {
		t.Fatalf("source guest reads %q after the refused migrations", got)
	}
	// The source still migrates: over TLS to a proper target, then the guest runs there.
	dst := startTarget(t, src)
	ctx := ctxT(t, opTimeout)
	if err := src.AddTLSCreds(ctx, tlsID, goodClient, TLSClient); err != nil {
		t.Fatal(err)
	}
	if err := dst.AddTLSCreds(ctx, tlsID, goodServer, TLSServer); err != nil {
		t.Fatal(err)
	}
	up := src.guestUptime(t)
	migration{params: MigrationParams{MaxBandwidth: 1 << 30, TLSCreds: tlsID, TLSHostname: "node-b"}}.run(t, src, dst)
	afterMigration(t, src, dst, up, token)
}

// TestTLSCredsArgs checks what AddTLSCreds and the TLS migration parameters refuse before
// anything reaches QEMU, and that adding an id twice replaces the object.
func TestTLSCredsArgs(t *testing.T) {
	ca := newTestCA(t)
	vm := startGuest(t, guestSpec(t, guestOpts{incoming: true}))
	ctx := ctxT(t, opTimeout)
	dir := tlsDir(t, ca, "node-a")
	for _, tc := range []struct {
		id, dir  string
		endpoint TLSEndpoint
	}{
		{"", dir, TLSServer},
		{"0tls", dir, TLSServer},
		{"tls,dir=/etc", dir, TLSServer},
		{"tls0", "relative/dir", TLSServer},
		{"tls0", dir + "/../creds", TLSServer},
		{"tls0", dir + "\n", TLSServer},
		{"tls0", dir, "both"},
	} {
		if err := vm.AddTLSCreds(ctx, tc.id, tc.dir, tc.endpoint); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("AddTLSCreds(%q, %q, %q) = %v, want ErrInvalidSpec", tc.id, tc.dir, tc.endpoint, err)
		}
	}
	for _, p := range []MigrationParams{
		{TLSCreds: "a b"},
		{TLSHostname: "host\"name"},
		{ClearTLS: true, TLSCreds: tlsID},
	} {
		if err := vm.SetMigrationParams(ctx, p); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("SetMigrationParams(%+v) = %v, want ErrInvalidSpec", p, err)
		}
	}
	// A missing folder is QEMU's refusal, and leaves nothing behind.
	if err := vm.AddTLSCreds(ctx, tlsID, filepath.Join(dir, "missing"), TLSServer); err == nil {
		t.Error("AddTLSCreds of a missing folder succeeded")
	}
	if err := vm.RemoveTLSCreds(ctx, tlsID); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("RemoveTLSCreds of nothing = %v, want ErrUnknownDevice", err)
	}
	for range 2 { // the second call replaces the first object
		if err := vm.AddTLSCreds(ctx, tlsID, dir, TLSServer); err != nil {
			t.Fatal(err)
		}
	}
	if err := vm.SetMigrationParams(ctx, MigrationParams{TLSCreds: tlsID, TLSHostname: "node-a"}); err != nil {
		t.Fatal(err)
	}
	if err := vm.SetMigrationParams(ctx, MigrationParams{ClearTLS: true}); err != nil {
		t.Fatal(err)
	}
	if err := vm.RemoveTLSCreds(ctx, tlsID); err != nil {
		t.Fatal(err)
	}
	var objs []struct{ Name string }
	if err := vm.execute(ctx, "qom-list", map[string]any{"path": "/objects"}, &objs); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Name == tlsID {
			t.Errorf("object %s still exists after RemoveTLSCreds", tlsID)
		}
	}
}

// TestTLSMigratePostcopy switches a TLS migration of a dirtying guest to post-copy: the page
// requests of the target travel back over the same TLS session.
func TestTLSMigratePostcopy(t *testing.T) {
	ca := newTestCA(t)
	src, up, token := prepareGuest(t, guestOpts{})
	startDirtying(t, src)
	dst := startTarget(t, src)
	ctx := ctxT(t, opTimeout)
	if err := src.AddTLSCreds(ctx, tlsID, tlsDir(t, ca, "node-a"), TLSClient); err != nil {
		t.Fatal(err)
	}
	if err := dst.AddTLSCreds(ctx, tlsID, tlsDir(t, ca, "node-b"), TLSServer); err != nil {
		t.Fatal(err)
	}
	res := migration{
		caps:     MigrationCaps{PostcopyRAM: true},
		params:   MigrationParams{MaxBandwidth: 64 << 20, TLSCreds: tlsID, TLSHostname: "node-b"},
		onStatus: func(mi MigrationInfo) bool { return mi.Status == "active" },
		during: func(t testing.TB) {
			if err := src.StartPostcopy(ctxT(t, opTimeout)); err != nil {
				t.Errorf("StartPostcopy: %v", err)
			}
		},
	}.run(t, src, dst)
	if !contains(res.statuses, "postcopy-active") {
		t.Errorf("statuses %v: never went post-copy", res.statuses)
	}
	afterMigration(t, src, dst, up, token)
	dst.sh(t, "kill -0 $(cat /tmp/dirty.pid)") // the dirtying loop survived the move
}
