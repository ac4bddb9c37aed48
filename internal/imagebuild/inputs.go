package imagebuild

import "path/filepath"

// Inputs are the host folders the images are built from.
type Inputs struct {
	Bin       string // vmlet, vmctl, vmlet-launcher, vmlet-pause (static builds)
	Root      string // the unpacked Debian packages QEMU's files come from ("" skips vmlet and the launcher)
	QEMUFiles string // the list of QEMU's files (qemu-files.txt)
}

// Named is a spec with its tarball's base name (pause → pause.tar).
type Named struct {
	Name string
	Spec Spec
}

// Specs are the images in: pause always, vmlet and the launcher when in.Root is set.
func Specs(in Inputs) ([]Named, error) {
	out := []Named{{Name: "pause", Spec: Pause(filepath.Join(in.Bin, "vmlet-pause"))}}
	return out, nil
}
