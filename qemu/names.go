package qemu

import "fmt"

// QEMU-side names vmlet derives. They all contain '_', which user ids cannot, so they never
// collide with a disk or NIC id (which are used as QEMU device ids unchanged).
const (
	chardevQMP    = "qmp_mon"
	chardevSerial = "serial_chr"
	chardevAgent  = "agent_chr"
	devSerial     = "serial_dev"
	devVirtSerial = "vser_0"
	devAgentPort  = "agent_port"
	objRNG        = "rng_src"
	devRNG        = "rng_dev"
	devSCSI       = "scsi_0"
	devBalloon    = "balloon_0"
	devVideo      = "video_0"
	vncClientFD   = "vnc_client" // getfd name of a VNC client socket until add_client takes it
	busSCSI       = devSCSI + ".0"
	serialLogSet  = 1 // -add-fd set id of the serial log file
	// firstDiskFdset is the first add-fd set id of a disk given as files (diskfiles.go):
	// every disk gets a new one, counted up from here, far from serialLogSet.
	firstDiskFdset = 100

	// Fixed PCI addresses on pcie.0, so that source and target agree whatever the device mix.
	addrVirtSerial = "0x5"
	addrRNG        = "0x6"
	addrSCSI       = "0x7"
	addrBalloon    = "0x8"
	addrVideo      = "0x1" // where QEMU itself puts a q35 guest's default VGA
	rootPortSlot0  = 0x10  // root ports fill functions 0-7 of slots 0x10-0x13
)

func rootPortID(port int) string      { return fmt.Sprintf("rp_%d", port) }
func fileNodeName(id string) string   { return "f_" + id }
func formatNodeName(id string) string { return "d_" + id }
func netdevID(id string) string       { return "n_" + id }

// Names for non-shared-storage migration (nbd.go, mirror.go): the target's NBD export of a
// disk, the source's NBD client node for it and the mirror job writing into it. Node names
// are limited to 31 bytes, hence the two-byte prefixes.
func nbdExportID(id string) string   { return "e_" + id }
func nbdClientNode(id string) string { return "b_" + id }
func mirrorJobID(id string) string   { return "j_" + id }
func tapFDName(id string, q int) string {
	return fmt.Sprintf("t_%s_%d", id, q)
}
func sataBus(port int) string { return fmt.Sprintf("ide.%d", port-1) }

// rootPortAddr is the PCI address of root port n (1-based) on pcie.0.
func rootPortAddr(n int) (addr string, multifunction bool) {
	i := n - 1
	return fmt.Sprintf("0x%x.0x%x", rootPortSlot0+i/8, i%8), i%8 == 0
}
