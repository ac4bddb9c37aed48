package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmlet/vmlet/controllers/health"
)

// TestManifestProbes: the DaemonSet's and the Deployment's liveness and readiness probes
// (and metrics ports) point at the paths and ports the binaries serve with the manifests'
// arguments, and those are the flags' defaults in code (a manifest that moved a port, or a
// default that moved without its manifest, fails here).
func TestManifestProbes(t *testing.T) {
	for _, tt := range []struct {
		file string
		cmd  *cobra.Command
		pod  func([]byte) (corev1.PodSpec, error)
	}{
		{"../../config/agent/daemonset.yaml", agentCmd(), func(b []byte) (corev1.PodSpec, error) {
			var ds appsv1.DaemonSet
			err := yaml.UnmarshalStrict(b, &ds)
			return ds.Spec.Template.Spec, err
		}},
		{"../../config/controller/deployment.yaml", controllerCmd(), func(b []byte) (corev1.PodSpec, error) {
			var d appsv1.Deployment
			err := yaml.UnmarshalStrict(b, &d)
			return d.Spec.Template.Spec, err
		}},
	} {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			b, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := tt.pod(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers", len(spec.Containers))
			}
			c := spec.Containers[0]
			if err := tt.cmd.ParseFlags(c.Args[1:]); err != nil { // Args[0] is the subcommand
				t.Fatalf("the manifest's arguments do not parse: %v", err)
			}
			port := func(flag string) int {
				f := tt.cmd.Flags().Lookup(flag)
				if f.Value.String() != f.DefValue {
					t.Errorf("--%s=%s in the manifest, the default is %s: keep the documented default", flag, f.Value, f.DefValue)
				}
				_, p, err := net.SplitHostPort(f.Value.String())
				if err != nil {
					t.Fatalf("--%s=%s: %v", flag, f.Value, err)
				}
				n, err := strconv.Atoi(p)
				if err != nil || n == 0 {
					t.Fatalf("--%s=%s: no fixed port", flag, f.Value)
				}
				return n
			}
			probes, metrics := port(flagHealthAddr), port(flagMetricsAddr)
			named := map[string]int32{}
			for _, p := range c.Ports {
				named[p.Name] = p.ContainerPort
			}
			if named["metrics"] != int32(metrics) {
				t.Errorf("containerPort metrics %d, the binary serves metrics on %d", named["metrics"], metrics)
			}
			for _, pr := range []struct {
				name string
				p    *corev1.Probe
				path string
			}{{"liveness", c.LivenessProbe, health.LivenessPath}, {"readiness", c.ReadinessProbe, health.ReadinessPath}} {
				if pr.p == nil || pr.p.HTTPGet == nil {
					t.Errorf("no %s httpGet probe", pr.name)
					continue
				}
				g := pr.p.HTTPGet
				got := g.Port.IntValue()
				if g.Port.IntValue() == 0 {
					got = int(named[g.Port.String()])
				}
				if got != probes || g.Path != pr.path {
					t.Errorf("%s probe GET %s on port %s (%d), the binary serves %s on %d", pr.name, g.Path, g.Port.String(), got, pr.path, probes)
				}
			}
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--metrics-advertise-address=") && !strings.HasSuffix(a, ":"+strconv.Itoa(metrics)) {
					t.Errorf("%s: not the metrics port %d", a, metrics)
				}
			}
		})
	}
}
