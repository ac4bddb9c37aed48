package launcher_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// guestAgent checks the guest agent RPCs and the agent state in GetDomain and events.
func guestAgent(t *testing.T, p *proc, rec *recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := rec.waitEvent(ctx, 0, "agent connected", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	d, err := p.client.GetDomain(ctx)
	if err != nil || !d.GetAgentConnected() {
		t.Fatalf("GetDomain agent_connected=%v (%v), want true", d.GetAgentConnected(), err)
	}
	if d.GetGuestInfo() == nil {
		t.Errorf("GetDomain says the agent is connected but has no guest_info (the first round runs before)")
	}
	if err := p.client.GuestPing(ctx); err != nil {
		t.Fatal(err)
	}
	polledGuestInfo(t, ctx, p, rec)
	info, err := p.client.GuestInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetAgentVersion() == "" || info.GetOs().GetKernelRelease() == "" || info.GetHostname() != "vmlet-guest" {
		t.Errorf("guest info: version %q os %v hostname %q", info.GetAgentVersion(), info.GetOs(), info.GetHostname())
	}
	if !slices.ContainsFunc(info.GetInterfaces(), func(i *pb.GuestInterface) bool { return i.GetName() == "lo" }) {
		t.Errorf("guest interfaces %v lack lo", info.GetInterfaces())
	}
	r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", "echo out; echo err >&2; exit 3"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetExitCode() != 3 || string(r.GetStdout()) != "out\n" || string(r.GetStderr()) != "err\n" {
		t.Errorf("guest exec: exit %d stdout %q stderr %q", r.GetExitCode(), r.GetStdout(), r.GetStderr())
	}
	r, err = p.client.GuestExec(ctx, "/bin/cat", nil, []byte("piped input"), 0)
	if err != nil || string(r.GetStdout()) != "piped input" {
		t.Errorf("guest exec with input: %q %v", r.GetStdout(), err)
	}
	_, err = p.client.GuestExec(ctx, "/no/such/program", nil, nil, 0)
	var re *launcher.RemoteError
	if !errors.Is(err, launcher.ErrAgentCommand) || !errors.As(err, &re) || re.Metadata["class"] == "" {
		t.Errorf("guest exec of a missing program: %v, want ErrAgentCommand with a class", err)
	}
	if err := p.client.GuestPing(ctx); err != nil {
		t.Errorf("agent unusable after a failed command: %v", err)
	}
}

// polledGuestInfo checks the launcher's own polling of the agent: an agent event with
// guest_info_changed soon after the agent connected, and GetDomain's guest_info with the test
// guest's os-release, kernel, host name and interfaces.
func polledGuestInfo(t *testing.T, ctx context.Context, p *proc, rec *recorder) {
	t.Helper()
	if _, err := rec.waitEvent(ctx, 0, "guest info changed", isGuestInfoChanged); err != nil {
		t.Fatal(err)
	}
	d, err := p.client.GetDomain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gi, osr := d.GetGuestInfo(), testguest.OSRelease(t)
	os := gi.GetOs()
	if os.GetId() != osr["ID"] || os.GetName() != osr["NAME"] || os.GetPrettyName() != osr["PRETTY_NAME"] ||
		os.GetVersion() != osr["VERSION"] || os.GetVersionId() != osr["VERSION_ID"] ||
		os.GetKernelRelease() != testguest.KernelRelease(t) || os.GetMachine() != "x86_64" || os.GetKernelVersion() == "" {
		t.Errorf("Domain.guest_info.os %v, want the test guest's os-release %v and kernel %s", os, osr, testguest.KernelRelease(t))
	}
	if gi.GetHostname() != "vmlet-guest" || gi.GetAgentVersion() == "" ||
		!slices.ContainsFunc(gi.GetInterfaces(), func(i *pb.GuestInterface) bool { return i.GetName() == "lo" }) {
		t.Errorf("Domain.guest_info: %v", gi)
	}
	if len(gi.GetUsers()) > 0 || len(gi.GetFilesystems()) > 0 {
		t.Errorf("Domain.guest_info has users or file systems (not polled): %v", gi)
	}
}
