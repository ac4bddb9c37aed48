package main

import (
	"fmt"

	"github.com/vmlet/vmlet/qemu/accel"
)

func main() {
	d := accel.Probe()
	fmt.Printf("%s (%s)\n", d.Accel, d.Reason)
}
