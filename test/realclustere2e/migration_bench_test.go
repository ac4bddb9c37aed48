package realclustere2e_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// BenchmarkClusterMigrationTLS measures what TLS costs a live migration between the two real
// kubelets (issue #15: ≤ 20 % throughput), on the real path (each node agent's relays in its
// pod, QEMU in the launcher pods), with a 1 GiB guest holding 700 MiB of random data (what
// QEMU sends is that, not zero pages). Each iteration migrates there and back twice in
// plaintext (disableTLS: true in the cluster's configuration) and twice in TLS, so both modes
// go both ways; QEMU's own figures (migrationState.progress) give the throughput. Two layouts
// in the same run: "shared", both nodes' pods on the machine's 2 CPUs (as the other migration
// benchmarks: the relays' AES-GCM competes with both QEMUs), and "pinned", each node's pods on
// a CPU of their own (realcluster.Cluster.PinNodes), which is what two hosts are.
//
//	go test -run '^$' -bench ClusterMigrationTLS -benchtime 3x ./test/realclustere2e/
func BenchmarkClusterMigrationTLS(b *testing.B) {
	need(b)
	if runtime.NumCPU() < len(cl.Nodes) {
		b.Skipf("needs a CPU per node to pin the nodes apart (%d here)", runtime.NumCPU())
	}
	b.Cleanup(func() {
		if err := cl.PinNodes(false); err != nil {
			b.Error(err)
		}
	})
	spec := strings.Replace(migratableSpec, "memory: {guest: 128Mi}", "memory: {guest: 1Gi}", 1)
	bt := boot(b, "tlsbench", spec)
	guestShell(b, bt.vmi, "mkdir -p /mnt/fill && mount -t tmpfs -o size=900m tmpfs /mnt/fill && dd if=/dev/urandom of=/mnt/fill/r bs=1M count=700 2>/dev/null")
	b.Cleanup(func() {
		kubectl(b, "", "delete", "configmap", "-n", "vmlet-system", "vmlet-config", "--ignore-not-found")
	})
	n := 0
	for _, layout := range []string{"shared", "pinned"} {
		if err := cl.PinNodes(layout == "pinned"); err != nil {
			b.Fatal(err)
		}
		rate := map[bool][]float64{}
		for range b.N {
			for _, plain := range []bool{true, true, false, false} {
				kubectl(b, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: vmlet-config, namespace: vmlet-system}\ndata:\n  migrations: \"disableTLS: "+
					strconv.FormatBool(plain)+"\"\n", "apply", "-f", "-")
				n++
				m := createMigration(b, fmt.Sprintf("%s-%d", bt.name, n), bt.name)
				v := waitVMI(b, bt.name, 5*time.Minute, m.Name+" completed", func(v *vmletv1.VirtualMachineInstance) bool {
					ms := v.Status.MigrationState
					if ms != nil && ms.MigrationUID == m.UID && ms.Failed {
						b.Fatalf("%s failed: %s", m.Name, ms.FailureReason)
					}
					return ms != nil && ms.MigrationUID == m.UID && ms.Completed && ms.Progress != nil && ms.Progress.TotalTimeMilliseconds > 0
				})
				ms := v.Status.MigrationState
				if c := ms.MigrationConfiguration; c == nil || c.DisableTLS == nil || *c.DisableTLS != plain {
					b.Fatalf("%s: migration configuration %+v, want disableTLS %v", m.Name, c, plain)
				}
				mibs := float64(ms.Progress.DataProcessedBytes) / (1 << 20) / (float64(ms.Progress.TotalTimeMilliseconds) / 1000)
				rate[plain] = append(rate[plain], mibs)
				b.Logf("%s %s tls=%v %s → %s: %d MiB in %d ms = %.0f MiB/s, downtime %d ms", layout, m.Name, !plain, ms.SourceNode, ms.TargetNode,
					ms.Progress.DataProcessedBytes>>20, ms.Progress.TotalTimeMilliseconds, mibs, ms.Progress.DowntimeMilliseconds)
				_ = kc.Delete(context.Background(), m)
			}
		}
		p, s := median(rate[true]), median(rate[false])
		b.ReportMetric(p, layout+"-plain-MiB/s")
		b.ReportMetric(s, layout+"-tls-MiB/s")
		b.ReportMetric(100*(1-s/p), layout+"-tls-cost-%")
	}
	deleteVMI(b, bt.name)
	assertGone(b, bt.fp)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
