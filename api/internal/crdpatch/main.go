package main

import (
	"fmt"
	"os"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func main() {
	for _, path := range os.Args[1:] {
		if err := patchFile(path, vmletv1.UnsupportedFields); err != nil {
			fmt.Fprintf(os.Stderr, "crdpatch: %v\n", err)
			os.Exit(1)
		}
	}
}
