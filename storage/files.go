package storage

import "path/filepath"

// FileSet is what a VM's QEMU opens of what Apply made or resolved, by how it is shared: the
// input of the node's SELinux labelling (package selinuxlabel).
type FileSet struct {
	// Private: the VM folder, its disks/ and boot/ folders and the files Apply made there
	// (qcow2 overlays, empty disks, cloud-init ISOs).
	Private []string
	// Shared: read-only files of the shared image cache (containerDisk bases) and the kernel
	// and initrd in boot/, which are hard links to the cache (one inode: labelling the link
	// labels the cache's file, which other VMs read too).
	Shared []string
	// Host: host files the VM is given at their resolved paths (hostDisks, claims, a claim
	// image an ephemeral overlay reads); they outlive the VM.
	Host []string
}

// FilesOf sorts a plan's files into a FileSet, with res (Apply's Result) for resolved host
// paths and containerDisk bases. The same choices as Grants, plus the shared content Grants
// leaves alone. Pure.
func FilesOf(p *VMPlan, res *Result) FileSet {
	resolved := map[string]string{}
	for _, d := range res.Disks {
		if v, ok := p.DiskVolumes[d.ID]; ok {
			resolved[v] = d.Path
		}
	}
	fs := FileSet{Private: []string{p.VMDir, filepath.Join(p.VMDir, disksDir), filepath.Join(p.VMDir, bootDir)}}
	for _, a := range p.Actions {
		switch a.Kind {
		case ActOverlay:
			fs.Private = append(fs.Private, a.Path)
			if b, ok := res.Bases[a.Volume]; ok {
				fs.Shared = append(fs.Shared, b)
			} else if a.Image == "" && a.Backing != "" {
				fs.Host = append(fs.Host, a.Backing)
			}
		case ActEmpty, ActISO:
			fs.Private = append(fs.Private, a.Path)
		case ActHostPath:
			path := a.Path
			if r, ok := resolved[a.Volume]; ok {
				path = r
			}
			fs.Host = append(fs.Host, path)
		case ActLinkKernel:
			fs.Shared = append(fs.Shared, a.Path)
			if a.Initrd != "" {
				fs.Shared = append(fs.Shared, a.Initrd)
			}
		case ActPull:
		}
	}
	return fs
}
