// Command accel prints the accelerator vmlet would use on this host and why.
package main

import (
	"fmt"

	"github.com/vmlet/vmlet/qemu/accel"
)

func main() {
	d := accel.Probe()
	fmt.Printf("%s (%s)\n", d.Accel, d.Reason)
}
