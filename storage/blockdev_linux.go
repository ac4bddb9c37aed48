package storage

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// BlockDevices stats p's block devices (BlockPaths, symlinks followed): their device numbers
// for the launcher's device filter. A path that is missing or not a block device is an
// ErrNotFound or ErrNotDiskFile error. Equivalent to: stat -L -c '%t:%T' PATH.
func (p *VMPlan) BlockDevices() ([]BlockDevice, error) {
	var out []BlockDevice
	for _, bp := range p.BlockPaths() {
		r, err := statDisk(bp.Path, true)
		if err != nil {
			return nil, fmt.Errorf("block device: %w", err)
		}
		var st unix.Stat_t
		if err := unix.Stat(r.path, &st); err != nil {
			return nil, fmt.Errorf("block device: stat %s: %w", r.path, err)
		}
		out = append(out, BlockDevice{BlockPath: bp, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)})
	}
	return out, nil
}
