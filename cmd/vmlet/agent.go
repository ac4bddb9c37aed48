package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func agentCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "Node agent against an existing cluster: not built yet (use `vmlet local`)",
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("the cluster-mode node agent (pod runtime) is not implemented yet; use `vmlet local`")
		},
	}
}
