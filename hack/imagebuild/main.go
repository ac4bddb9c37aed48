package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vmlet/vmlet/internal/imagebuild"
)

func main() {
	out := flag.String("out", "", "folder to write the tarballs into")
	bin := flag.String("bin", "", "folder holding vmlet, vmctl, vmlet-launcher and vmlet-pause (CGO_ENABLED=0)")
	root := flag.String("root", "", "unpacked Debian packages (dpkg-deb -x of each) for the QEMU files")
	qemuFiles := flag.String("qemu-files", "", "the list of files QEMU loads (internal/imagebuild/qemu-files.txt)")
	only := flag.String("only", "", "build only this image (pause, vmlet, vmlet-launcher)")
	flag.Parse()
	if *out == "" || *bin == "" {
		fmt.Fprintln(os.Stderr, "imagebuild: --out and --bin are required")
		os.Exit(2)
	}
	if err := run(*out, *bin, *root, *qemuFiles, *only); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(out, bin, root, qemuFiles, only string) error {
	epoch, err := imagebuild.Epoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	specs, err := imagebuild.Specs(imagebuild.Inputs{Bin: bin, Root: root, QEMUFiles: qemuFiles})
	if err != nil {
		return err
	}
	for _, s := range specs {
		if only != "" && s.Name != only {
			continue
		}
		fmt.Fprintf(os.Stderr, "imagebuild: %s...\n", s.Spec.Ref)
		img, err := imagebuild.Build(s.Spec, epoch)
		if err != nil {
			return err
		}
		file := filepath.Join(out, s.Name+".tar")
		if err := imagebuild.WriteArchive(file, s.Spec.Ref, img); err != nil {
			return err
		}
		if err := report(file, s.Spec.Ref, img); err != nil {
			return err
		}
	}
	return nil
}

func report(file, ref string, img v1.Image) error {
	sz, err := imagebuild.Sizes(img)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s %d %d\n", filepath.Base(file), ref, sz.Digest, sz.Compressed, sz.Uncompressed)
	return nil
}
