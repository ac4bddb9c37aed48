package main

import (
	"testing"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// startAPI starts a real kube-apiserver with vmlet's API for one test (stopped when it ends)
// and unsets KUBECONFIG (noKubeconfig): every vmctl call of the test names its kubeconfig.
func startAPI(t *testing.T) *apienv.Env {
	t.Helper()
	prereq.APIServer(t)
	env := apienv.StartT(t, apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme}})
	noKubeconfig(t)
	return env
}
