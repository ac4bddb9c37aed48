package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vmlet/vmlet/test/testguest"
)

// kubeconfigFor writes a kubeconfig that authenticates as u (its bearer token) against the
// stack's API server, with "default" as the context's namespace.
func kubeconfigFor(t *testing.T, u *apiUser) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: u.cfg.Host, CertificateAuthorityData: u.cfg.CAData, CertificateAuthority: u.cfg.CAFile}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: u.cfg.BearerToken}
	cfg.Contexts["user"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user", Namespace: u.ns}
	cfg.CurrentContext = "user"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// runVmctl runs the vmctl binary with KUBECONFIG=kubeconfig and returns its stdout, stderr and
// exit code.
func runVmctl(t *testing.T, vmctl, kubeconfig, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(vmctl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("vmctl %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// vmctlThroughTheAPI drives the vmctl binary by VMI name against the stack's real aggregated
// server, as the users of TestLocalSubresources: guest info as view; the console (a command
// typed into the guest's shell, Ctrl-] to leave), a screenshot and a 403 on qmp as edit; a
// QMP command, a QMP shell session from a script and the QMP log naming the caller as admin.
func vmctlThroughTheAPI(t *testing.T, s *localSetup, view, edit, adm *apiUser, uname []string) {
	vmctl := buildVmctl(t, s)
	viewKC, editKC, admKC := kubeconfigFor(t, view), kubeconfigFor(t, edit), kubeconfigFor(t, adm)

	out, stderr, code := runVmctl(t, vmctl, viewKC, "", "guestosinfo", "sub")
	var info struct {
		Hostname string `json:"hostname"`
		OS       struct {
			KernelRelease string `json:"kernelRelease"`
		} `json:"os"`
	}
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.OS.KernelRelease != uname[0] || info.Hostname != uname[2] {
		t.Errorf("vmctl guestosinfo as view: exit %d, %v, %q %s; the guest says kernel %s, hostname %s", code, err, out, stderr, uname[0], uname[2])
	}
	if _, stderr, code := runVmctl(t, vmctl, editKC, "", "qmp", "sub", "query-status"); code != 6 {
		t.Errorf("vmctl qmp as edit: exit %d (%s), want 6 (forbidden)", code, stderr)
	}

	// The console on a terminal (a pty): the guest's shell answers a command typed through
	// vmctl; Ctrl-] quits (exit 0).
	cmd := exec.Command(vmctl, "console", "sub")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+editKC)
	testguest.ConsoleRoundTrip(t, cmd)

	// A screenshot of the display: a PNG that is not one colour.
	shot := filepath.Join(t.TempDir(), "shot.png")
	if _, stderr, code := runVmctl(t, vmctl, editKC, "", "vnc", "screenshot", "sub", "-o", shot); code != 0 {
		t.Errorf("vmctl vnc screenshot: exit %d %s", code, stderr)
	} else if f, err := os.Open(shot); err != nil {
		t.Error(err)
	} else {
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("vmctl vnc screenshot: %v", err)
		} else if uniform(img) {
			t.Errorf("vmctl vnc screenshot: every pixel the same colour")
		}
	}

	// admin: one command, then a scripted QMP shell session, then the log naming the caller.
	if out, stderr, code := runVmctl(t, vmctl, admKC, "", "qmp", "sub", "query-status"); code != 0 || !strings.Contains(out, `"status": "running"`) {
		t.Errorf("vmctl qmp as admin: exit %d %q %s", code, out, stderr)
	}
	if out, stderr, code := runVmctl(t, vmctl, admKC, "query-name\nquery-version\n", "qmp", "sub"); code != 0 || !strings.Contains(out, `"qemu"`) {
		t.Errorf("vmctl qmp session from a script as admin: exit %d %q %s", code, out, stderr)
	}
	out, stderr, code = runVmctl(t, vmctl, admKC, "", "qmp-log", "sub", "--tail", "50")
	if code != 0 || !strings.Contains(out, "query-version") || !strings.Contains(out, adm.name) {
		t.Errorf("vmctl qmp-log as admin: exit %d, want query-version with caller %s in:\n%s%s", code, adm.name, out, stderr)
	}
}

// uniform reports whether every pixel of img has the same colour.
func uniform(img image.Image) bool {
	b := img.Bounds()
	first := img.At(b.Min.X, b.Min.Y)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if img.At(x, y) != first {
				return false
			}
		}
	}
	return true
}
