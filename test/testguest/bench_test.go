package testguest

import (
	"context"
	"os"
	"testing"
)

// BenchmarkBootToReady measures Boot (QEMU start, TCG) until the guest prints MarkerReady.
// Run serially: go test -run '^$' -bench BootToReady -benchtime 5x ./test/testguest/
func BenchmarkBootToReady(b *testing.B) {
	files := Assets(b)
	for b.Loop() {
		vm := Boot(b, BootOptions{Files: files})
		ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
		if err := vm.Console.Wait(ctx, MarkerReady); err != nil {
			cancel()
			b.Fatal(err)
		}
		b.StopTimer()
		if err := vm.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	if st, err := os.Stat(files.Initrd); err == nil {
		b.ReportMetric(float64(st.Size())/(1<<20), "initramfs-MiB")
	}
}

// BenchmarkAssetsWarm measures a cached run of build.sh (what every test process pays once).
func BenchmarkAssetsWarm(b *testing.B) {
	Assets(b) // make sure the cache is warm
	for b.Loop() {
		if _, missing, err := build(); err != nil || missing != "" {
			b.Fatalf("build: %v %s", err, missing)
		}
	}
}
