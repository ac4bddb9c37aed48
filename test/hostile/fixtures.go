package hostile

// Fixtures are the image fixtures a case may name in an "image:" line; the runner builds each
// as an OCI layout (what they hold is what this says).
var Fixtures = map[string]string{
	"nodisk":          "a containerDisk with no file in /disk",
	"twodisks":        "a containerDisk with two disk files in /disk",
	"emptydisk":       "a containerDisk whose disk file is empty",
	"symlink-escape":  "a containerDisk whose /disk/disk.img is a symlink to ../../../../etc/shadow",
	"devicefile":      "a containerDisk whose /disk/disk.img is a character device (1:3)",
	"hardlink-escape": "a containerDisk whose /disk/disk.img is a hard link to /etc/shadow (not in the image)",
	"sparse10g":       "a containerDisk whose disk is a 10 GiB sparse raw file (a PAX sparse tar entry)",
	"backingfile":     "a containerDisk whose qcow2 names /etc/shadow as its backing file",
	"notadisk":        "a containerDisk whose disk file is text (a raw image of 13 bytes)",
	"nokernel":        "a kernelBoot image with the initrd but no kernel",
	"kernelonly":      "a kernelBoot image with the kernel at /vmlinuz and nothing else",
}
