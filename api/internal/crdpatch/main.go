package main

import (
	"fmt"
	"os"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// unsupported are the KubeVirt fields vmlet rejects, by the kind of the CRD that declares them.
var unsupported = map[string]Declarations{
	"VirtualMachineInstance": {
		Fields:      vmletv1.UnsupportedFields,
		Description: "Not supported by vmlet: a kubevirt.io/v1 field that vmlet rejects.",
		Message:     vmletv1.UnsupportedMessage,
	},
	"MigrationPolicy": {
		Fields:      migrationsv1.UnsupportedFields,
		Description: "Not supported by vmlet: a migrations.kubevirt.io/v1alpha1 field that vmlet rejects.",
		Message:     migrationsv1.UnsupportedMessage,
	},
}

func main() {
	for _, path := range os.Args[1:] {
		if err := patchFile(path, unsupported); err != nil {
			fmt.Fprintf(os.Stderr, "crdpatch: %v\n", err)
			os.Exit(1)
		}
	}
}
