package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's connection flags (--kubeconfig, --context, --namespace/-n, --server,
// --token, …) loaded with client-go's rules, as kubectl does: --kubeconfig, else $KUBECONFIG
// (a list of files), else ~/.kube/config, else the in-cluster service account. Commands that
// reach the API server through a kubeconfig (top; console/QMP by VMI name later) share them.
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

// addFlags registers the flags on fs.
func (k *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests")
	clientcmd.BindOverrideFlags(&k.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// clientConfig is the merged, not yet loaded configuration.
func (k *kubeFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
}

// restConfig is the configuration of a client for the API server.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	cfg, err := k.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}

// namespace is --namespace, else the context's namespace, else "default" (kubectl's rule).
// Without any kubeconfig it is "default" too, unless --kubeconfig named a file that fails.
func (k *kubeFlags) namespace() (string, error) {
	ns, _, err := k.clientConfig().Namespace()
	if clientcmd.IsEmptyConfig(err) {
		return "default", nil
	}
	if err != nil {
		return "", fmt.Errorf("load kubeconfig: %w", err)
	}
	return ns, nil
}
