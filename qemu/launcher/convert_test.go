package launcher

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

var testPaths = Paths{Root: "/run/vmlet/x"}

func TestSpecConversion(t *testing.T) {
	full := &qemu.Spec{
		Name: "vm-1", UUID: "2c1f2d4e-8a7b-4c3d-9e0f-112233445566", Machine: "pc-q35-7.2",
		Accel: qemu.AccelTCG, TCGCacheMiB: 32,
		CPU:           qemu.CPU{Model: "qemu64", Sockets: 1, Cores: 2, Threads: 1, MaxSockets: 4, PluggedSockets: 1},
		MemoryMiB:     256,
		MemoryHotplug: &qemu.MemoryHotplug{MaxMiB: 1024, RequestedMiB: 128, BlockMiB: 2},
		Boot:          qemu.Boot{Kernel: "/k", Initrd: "/i", Cmdline: "console=ttyS0"},
		Disks: []qemu.Disk{
			{ID: "root", Path: "/d/root.qcow2", Format: qemu.FormatQCOW2, Bus: qemu.BusVirtio, BootIndex: 1,
				Cache: qemu.CacheNone, AIO: qemu.AIONative, Serial: "S1", Port: 3},
			{ID: "cd", Path: "/d/ci.iso", Format: qemu.FormatRaw, Bus: qemu.BusSATA, CDROM: true, ReadOnly: true},
		},
		NICs:         []qemu.NIC{{ID: "net0", MAC: "52:54:00:00:00:01", TapName: "tap0", Queues: 2, Model: "virtio", Port: 4, BootIndex: 2}},
		Serial:       &qemu.Serial{Socket: testPaths.ConsoleSocket(), LogFile: testPaths.SerialLog()},
		Agent:        &qemu.Agent{Socket: testPaths.AgentSocket()},
		RNG:          true,
		Panic:        []qemu.PanicModel{qemu.PanicPCI, qemu.PanicISA},
		Balloon:      &qemu.Balloon{StatsPeriodSeconds: 10, FreePageReporting: true},
		Graphics:     &qemu.Graphics{Socket: testPaths.VNCSocket()},
		SCSI:         true,
		HotplugPorts: 4,
		Migratable:   true,
		StartPaused:  true,
	}
	cases := []struct {
		name string
		spec *qemu.Spec
		ns   NetNS
	}{
		{"full", full, NetNS{"net0": "/var/run/netns/pod"}},
		{"minimal", &qemu.Spec{Name: "m", MemoryMiB: 128}, NetNS{}},
		{"no serial, no agent, nic in own netns", &qemu.Spec{Name: "n", MemoryMiB: 128,
			NICs: []qemu.NIC{{ID: "a", MAC: "52:54:00:00:00:02", TapName: "t"}}}, NetNS{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wire := SpecToProto(c.spec, c.ns)
			back, ns, err := SpecFromProto(wire, testPaths)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, c.spec) {
				t.Errorf("qemu → wire → qemu changed the spec:\n got %+v\nwant %+v", back, c.spec)
			}
			if !reflect.DeepEqual(ns, c.ns) {
				t.Errorf("netns %v, want %v", ns, c.ns)
			}
			again := SpecToProto(back, ns)
			if !proto.Equal(again, wire) {
				t.Errorf("wire → qemu → wire changed the spec:\n got %v\nwant %v", again, wire)
			}
		})
	}
}

func TestSpecFromProtoFields(t *testing.T) {
	w := &pb.DomainSpec{Name: "x", Serial: true, Agent: true, Graphics: true,
		Nics: []*pb.NIC{{Id: "n", TapName: "t", Netns: "/proc/1/ns/net"}}}
	s, ns, err := SpecFromProto(w, testPaths)
	if err != nil {
		t.Fatal(err)
	}
	if s.Serial == nil || s.Serial.Socket != "/run/vmlet/x/sockets/console.sock" || s.Serial.LogFile != "/run/vmlet/x/logs/serial.log" {
		t.Errorf("serial %+v: want the launcher's console socket and serial log", s.Serial)
	}
	if s.Agent == nil || s.Agent.Socket != "/run/vmlet/x/sockets/qga.sock" {
		t.Errorf("agent %+v: want the launcher's qga socket", s.Agent)
	}
	if s.Graphics == nil || s.Graphics.Socket != "/run/vmlet/x/sockets/vnc.sock" {
		t.Errorf("graphics %+v: want the launcher's vnc socket", s.Graphics)
	}
	if ns["n"] != "/proc/1/ns/net" || s.NICs[0].TapName != "t" || s.NICs[0].TapFDs != nil {
		t.Errorf("nic %+v netns %v", s.NICs[0], ns)
	}
	if _, _, err := SpecFromProto(nil, testPaths); err == nil {
		t.Error("nil spec converted")
	}
}
