package main

import (
	"fmt"
	"os"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// unsupported are the KubeVirt fields vmlet rejects, by the kind of the CRD that declares them.
var unsupported = map[string][]vmletv1.UnsupportedField{
	"VirtualMachineInstance": vmletv1.UnsupportedFields,
	"MigrationPolicy":        migrationsv1.UnsupportedFields,
}

func main() {
	for _, path := range os.Args[1:] {
		if err := patchFile(path, unsupported); err != nil {
			fmt.Fprintf(os.Stderr, "crdpatch: %v\n", err)
			os.Exit(1)
		}
	}
}
