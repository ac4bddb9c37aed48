package imagebuild

import (
	"fmt"
	"os"
	"path/filepath"
)

// Inputs are the host folders the images are built from.
type Inputs struct {
	Bin       string // vmlet, vmctl, vmlet-launcher, vmlet-pause (static builds)
	Root      string // the unpacked Debian packages of QEMUFiles and ca-certificates ("" builds pause only)
	QEMUFiles string // the list of QEMU's files (qemu-files.txt)
}

// Named is a spec with its archive's base name (pause → pause.tar).
type Named struct {
	Name string
	Spec Spec
}

// Specs are the images of in: pause always; vmlet and vmlet-launcher when in.Root is set.
func Specs(in Inputs) ([]Named, error) {
	out := []Named{{Name: "pause", Spec: Pause(filepath.Join(in.Bin, "vmlet-pause"))}}
	if in.Root == "" {
		return out, nil
	}
	f, err := os.Open(in.QEMUFiles)
	if err != nil {
		return nil, fmt.Errorf("read QEMU files list: %w", err)
	}
	defer f.Close()
	list, err := ParseQEMUFiles(f)
	if err != nil {
		return nil, err
	}
	vmlet := Vmlet(filepath.Join(in.Bin, "vmlet"), filepath.Join(in.Bin, "vmctl"))
	if err := fromRoot(&vmlet, in.Root, list, ListVmlet); err != nil {
		return nil, err
	}
	bundle, err := CABundle(in.Root)
	if err != nil {
		return nil, err
	}
	vmlet.Files = append(vmlet.Files, File{Path: CABundlePath, Content: bundle})
	launcher := Launcher(filepath.Join(in.Bin, "vmlet-launcher"))
	if err := fromRoot(&launcher, in.Root, list, ListLauncher); err != nil {
		return nil, err
	}
	return append(out, Named{Name: "vmlet", Spec: vmlet}, Named{Name: "vmlet-launcher", Spec: launcher}), nil
}
