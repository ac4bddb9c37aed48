package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestControllerCommand runs the built `vmlet controller` against a real API server: a VMI gets
// a launcher pod with the flags' image and emulation setting, and SIGTERM stops it cleanly.
func TestControllerCommand(t *testing.T) {
	prereq.APIServer(t)
	env := apienv.StartT(t, apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme}})
	bin := filepath.Join(t.TempDir(), "vmlet")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vmlet: %v\n%s", err, out)
	}
	logs := &logbuf.Buffer{}
	cmd := exec.Command(bin, "controller", "--kubeconfig", env.Kubeconfig, "--metrics-bind-address", "0",
		"--health-probe-bind-address", "0", "--launcher-image", "example.test/launcher:v9", "--allow-emulation=false")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false // set once exited was received
	t.Cleanup(func() {
		if !reaped {
			_ = cmd.Process.Kill()
			t.Logf("vmlet controller killed: %v", <-exited)
		}
		if t.Failed() {
			t.Logf("vmlet controller output:\n%s", logs.String())
		}
	})

	ctx := context.Background()
	guest := resource.MustParse("128Mi")
	vmi := &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cmd-vm"},
		Spec:       vmletv1.VirtualMachineInstanceSpec{Domain: vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: &guest}}},
	}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for pod == nil {
		var l corev1.PodList
		if err := env.Client.List(ctx, &l, client.InNamespace("default"), launcherpod.MatchingVMI(vmi.UID)); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 0 {
			pod = &l.Items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no launcher pod within 2m")
		}
		select {
		case err := <-exited:
			reaped = true
			t.Fatalf("vmlet controller exited: %v", err)
		case <-tick.C:
		}
	}
	if img := pod.Spec.Containers[0].Image; img != "example.test/launcher:v9" {
		t.Errorf("image %s", img)
	}
	if kvm := pod.Spec.Containers[0].Resources.Limits[launcherpod.ResourceKVM]; kvm.Value() != 1 {
		t.Errorf("limits %v: --allow-emulation=false must request %s", pod.Spec.Containers[0].Resources.Limits, launcherpod.ResourceKVM)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Errorf("vmlet controller after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("vmlet controller did not stop within 1m of SIGTERM")
	}
	if out := logs.String(); strings.Contains(out, "panic") {
		t.Errorf("output mentions a panic:\n%s", out)
	}
}
