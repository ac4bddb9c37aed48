package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "vmlet",
		Short:         "Run virtual machines on Kubernetes without libvirt",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(localCmd(), agentCmd(), controllerCmd())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "vmlet:", err)
		os.Exit(1)
	}
}
