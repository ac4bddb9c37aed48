package storage

// BlockPath is a host block device a plan's disks open: a Block claim, or the backing device of
// an ephemeral overlay (read-only).
type BlockPath struct {
	Path     string
	ReadOnly bool
}

// BlockDevice is a BlockPath's device number, for the launcher's device filter.
type BlockDevice struct {
	BlockPath
	Major, Minor uint32
}

// BlockPaths lists the block devices p's disks open, in action order: what the launcher's
// device filter must let QEMU open (read-only when every disk of the device is). Pure.
func (p *VMPlan) BlockPaths() []BlockPath {
	readOnly := map[string]bool{} // volume → its disk is read-only
	for _, d := range p.Disks {
		readOnly[p.DiskVolumes[d.ID]] = d.ReadOnly
	}
	var out []BlockPath
	for _, a := range p.Actions {
		switch {
		case a.Kind == ActHostPath && a.Block:
			out = append(out, BlockPath{Path: a.Path, ReadOnly: readOnly[a.Volume]})
		case a.Kind == ActOverlay && a.Block && a.Backing != "":
			out = append(out, BlockPath{Path: a.Backing, ReadOnly: true})
		}
	}
	return out
}
