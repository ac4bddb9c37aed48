package storage

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/testguest"
)

// BenchmarkContainerDiskPrepare measures Plan + Apply of one containerDisk volume (pull over
// the registry protocol from 127.0.0.1, digest checks, unpack, qemu-img validation, overlay):
// cold = empty image cache each time, warm = image cached (IfNotPresent: no registry request,
// cached validation, only the overlay is made).
func BenchmarkContainerDiskPrepare(b *testing.B) {
	e := newEnv(b)
	random := filepath.Join(b.TempDir(), "random.raw")
	buf := make([]byte, 32<<20)
	rand.Read(buf)
	if err := os.WriteFile(random, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	randomQCOW2 := filepath.Join(b.TempDir(), "random.qcow2")
	run(b, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", random, randomQCOW2)
	images := []struct{ name, disk string }{
		{"testguest-data-qcow2", testguest.Assets(b).DataDisk}, // 64 MiB virtual, 0.4 MB file
		{"random-32mib-qcow2", randomQCOW2},                    // incompressible
	}
	for _, im := range images {
		ref := e.reg.Push(b, "bench/"+im.name+":v1", storagetest.ContainerDisk(b, im.disk))
		vols := []Volume{{Name: "root", ContainerDisk: &ContainerDisk{Image: ref}}}
		for _, warm := range []bool{false, true} {
			name := im.name + "/cold"
			if warm {
				name = im.name + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				i := 0
				var h *Host
				for b.Loop() {
					b.StopTimer()
					i++
					if !warm || h == nil {
						c, err := oci.Open(oci.Options{Dir: filepath.Join(b.TempDir(), fmt.Sprint("cache", i))})
						if err != nil {
							b.Fatal(err)
						}
						h = &Host{Images: c}
						if warm {
							prime(b, h, vols, filepath.Join(e.dir, "prime"))
						}
					}
					opts := e.opts()
					opts.VMDir = filepath.Join(e.dir, "vms", fmt.Sprint("b", i))
					b.StartTimer()
					p, err := Plan(vols, nil, opts)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := h.Apply(ctxT(b), p); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := Cleanup(opts.VMDir); err != nil {
						b.Fatal(err)
					}
					if !warm {
						os.RemoveAll(h.Images.Dir())
					}
					b.StartTimer()
				}
			})
		}
	}
}

// prime pulls the volumes' images into h's cache (and validates them) once.
func prime(b *testing.B, h *Host, vols []Volume, vmDir string) {
	opts := Options{VMDir: vmDir}
	p, err := Plan(vols, nil, opts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Apply(ctxT(b), p); err != nil {
		b.Fatal(err)
	}
	if err := Cleanup(vmDir); err != nil {
		b.Fatal(err)
	}
}
