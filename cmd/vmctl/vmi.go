package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// vmTarget is one VMI addressed by name through the API server.
type vmTarget struct {
	cfg *rest.Config
	vmi subresclient.VMI
	sub *subresclient.Client
}

// restConfig is the client configuration for k: the kubeconfig's, or the test's (c.kubeConfig).
func (c *cli) restConfig(k *kubeFlags) (*rest.Config, error) {
	if c.kubeConfig != nil {
		return c.kubeConfig(k)
	}
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 { // no --request-timeout
		cfg.Timeout = c.timeout
	}
	return cfg, nil
}

// resolve resolves NAME in k's namespace (-n, else the context's, else "default").
func (c *cli) resolve(k *kubeFlags, name string) (*vmTarget, error) {
	cfg, err := c.restConfig(k)
	if err != nil {
		return nil, err
	}
	ns, err := k.namespace()
	if err != nil {
		return nil, err
	}
	sc, err := subresclient.New(cfg)
	if err != nil {
		return nil, err
	}
	return &vmTarget{cfg: cfg, vmi: subresclient.VMI{Namespace: ns, Name: name}, sub: sc}, nil
}

// explain adds what a generic 404 from the aggregated API most likely means.
func explain(err error) error {
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Code == 404 && se.ErrStatus.Details == nil {
		return fmt.Errorf("%w (is the subresources API served? kubectl get apiservice v1alpha1.subresources.vmlet.dev)", err)
	}
	return err
}

// vmiCmd is a command that addresses a VMI by name: it gets kubectl's connection flags, and
// the VM group.
// Its API errors get their exit statuses (classifyAPI).
func vmiCmd(cmd *cobra.Command, k *kubeFlags) *cobra.Command {
	k.addFlags(cmd.Flags())
	cmd.GroupID = "vm"
	runE := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return classifyAPI(runE(cmd, args)) }
	return cmd
}
