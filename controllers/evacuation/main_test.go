package evacuation_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/apienv"
)

// One real API server for the package (no kubelet, scheduler or node agents: the tests write
// what those would).
var env *apienv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // make unit: the API tests skip in prereq.APIServer, the pure ones run
	}
	var err error
	env, err = apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start api server:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop api server:", err)
	}
	os.Exit(code)
}
