package qemu

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu/accel"
)

var update = flag.Bool("update", false, "rewrite testdata/*.argv golden files")

var (
	tcgHost = accel.Decision{Accel: accel.TCG, Reason: "test host: tcg"}
	kvmHost = accel.Decision{Accel: accel.KVM, Reason: "test host: kvm"}
)

func baseSpec() Spec {
	return Spec{
		Name:      "vm1",
		MemoryMiB: 256,
		Boot:      Boot{Kernel: "/var/lib/vmlet/vmlinuz", Initrd: "/var/lib/vmlet/initrd.gz", Cmdline: "console=ttyS0,115200 quiet"},
	}
}

func fullSpec() Spec {
	s := baseSpec()
	s.UUID = "6F1E1F44-3B2A-4C55-9E7B-0123456789AB"
	s.CPU = CPU{Sockets: 1, Cores: 2, Threads: 2}
	s.TCGCacheMiB = 32
	s.Disks = []Disk{
		{ID: "root", Path: "/var/lib/vmlet/root.qcow2", Format: FormatQCOW2, BootIndex: 1, Cache: CacheNone, AIO: AIONative},
		{ID: "cloudinit", Path: "/var/lib/vmlet/ci,1.iso", Bus: BusSATA, CDROM: true},
		{ID: "data", Path: "/dev/vg0/data", Bus: BusSATA, Cache: CacheWritethrough},
		{ID: "logs", Path: "/var/lib/vmlet/logs.img", Bus: BusSCSI, Serial: "LOGS-1"},
	}
	s.NICs = []NIC{{ID: "eth0", MAC: "52:54:00:12:34:56", TapName: "tap0", Queues: 2}}
	s.Serial = &Serial{Socket: "/run/vmlet/vm1/serial.sock", LogFile: "/var/log/vmlet/vm1-serial.log"}
	s.Agent = &Agent{Socket: "/run/vmlet/vm1/qga.sock"}
	s.RNG = true
	s.Balloon = &Balloon{StatsPeriodSeconds: 10, FreePageReporting: true}
	s.Graphics = &Graphics{Socket: "/run/vmlet/vm1/vnc.sock"}
	s.HotplugPorts = 9
	return s
}

func fullFDs() FDs { return FDs{QMP: 3, Serial: 4, SerialLog: 5, Agent: 6} }

func TestBuildArgvGolden(t *testing.T) {
	migratable := baseSpec()
	migratable.Migratable = true
	migratable.HotplugPorts = 2
	incoming := fullSpec()
	incoming.Migratable, incoming.Machine, incoming.Incoming = true, "pc-q35-7.2", true
	incoming.CPU.Model = "Skylake-Client-v4"
	fdBoot := baseSpec()
	fdBoot.Boot.Kernel = "/var/lib/vmlet/boot,dir/vmlinuz"
	fdBoot.Boot.Initrd = "/var/lib/vmlet/boot,dir/initrd=x.gz"
	firmware := Spec{Name: "fw", MemoryMiB: 512, Accel: AccelKVM,
		Disks: []Disk{{ID: "root", Path: "/img/root.raw", BootIndex: 1}}}
	// SATA disks are the only ones on the command line: their bootindex is there too.
	bootOrder := Spec{Name: "boot", MemoryMiB: 256, Disks: []Disk{
		{ID: "scratch", Path: "/img/scratch.qcow2", Format: FormatQCOW2, Bus: BusSATA},
		{ID: "cd", Path: "/img/cd.iso", Bus: BusSATA, CDROM: true, BootIndex: 3},
		{ID: "root", Path: "/img/root.qcow2", Format: FormatQCOW2, Bus: BusSATA, BootIndex: 1},
	}, NICs: []NIC{{ID: "eth0", MAC: "52:54:00:12:34:56", TapName: "tap0", BootIndex: 2}}}

	tests := []struct {
		name string
		spec Spec
		env  Env
	}{
		{"minimal", baseSpec(), Env{Accel: tcgHost, FDs: FDs{QMP: 3}}},
		{"minimal-kvm", baseSpec(), Env{Accel: kvmHost, FDs: FDs{QMP: 3}}},
		{"full", fullSpec(), Env{Accel: tcgHost, BlockDevices: map[string]bool{"data": true}, FDs: fullFDs()}},
		{"migratable", migratable, Env{Accel: tcgHost, DefaultMachine: "pc-q35-7.2", FDs: FDs{QMP: 3}}},
		{"incoming", incoming, Env{Accel: tcgHost, FDs: fullFDs()}},
		{"fd-boot", fdBoot, Env{Accel: tcgHost, FDs: FDs{QMP: 3, Kernel: 4, Initrd: 5}}},
		{"firmware-kvm", firmware, Env{Accel: kvmHost, FDs: FDs{QMP: 3}}},
		{"boot-order", bootOrder, Env{Accel: tcgHost, FDs: FDs{QMP: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := BuildArgv(&tt.spec, tt.env)
			if err != nil {
				t.Fatalf("BuildArgv: %v", err)
			}
			got := strings.Join(args, "\n") + "\n"
			path := filepath.Join("testdata", tt.name+".argv")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if got != string(want) {
				t.Errorf("argv differs from %s (run with -update after checking):\n%s", path, lineDiff(string(want), got))
			}
			checkArgvInvariants(t, &tt.spec, args)
		})
	}
}

// checkArgvInvariants: the guest starts stopped, every option string parses into the keys we
// meant, and no disk/NIC appears on the command line except SATA disks (as JSON).
func checkArgvInvariants(t *testing.T, spec *Spec, args []string) {
	t.Helper()
	if args[0] != "-S" {
		t.Errorf("argv must start with -S, got %q", args[0])
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Fatalf("argv[%d] = %q is not a flag: an earlier value swallowed or leaked an argument", i, a)
		}
		if _, single := noValueFlags[a]; single {
			continue
		}
		i++
		if i >= len(args) {
			t.Fatalf("flag %s has no value", a)
		}
		checkOptionValue(t, a, args[i])
	}
	sata := 0
	for _, d := range spec.Disks {
		if d.withDefaults().Bus == BusSATA {
			sata++
		}
	}
	blockdevs := 0
	for i, a := range args {
		switch a {
		case "-netdev", "-nic", "-net", "-drive", "-hda", "-cdrom":
			t.Errorf("argv[%d] %s: disks and NICs go over QMP", i, a)
		case "-blockdev":
			blockdevs++
		case "-device":
			if strings.Contains(args[i+1], "virtio-net") || strings.Contains(args[i+1], "virtio-blk") {
				t.Errorf("argv[%d] %s %s: disks and NICs go over QMP", i, a, args[i+1])
			}
		}
	}
	if blockdevs != 2*sata {
		t.Errorf("%d -blockdev for %d SATA disks, want two each and none for other buses", blockdevs, sata)
	}
}

var noValueFlags = map[string]struct{}{"-S": {}, "-nodefaults": {}, "-no-user-config": {}, "-nographic": {}}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

func TestBuildArgvEnvErrors(t *testing.T) {
	s := fullSpec()
	tests := []struct {
		name string
		spec Spec
		env  Env
		want error
	}{
		{"no qmp fd", s, Env{Accel: tcgHost, FDs: FDs{Serial: 4, SerialLog: 5, Agent: 6}}, ErrInvalidEnv},
		{"no serial fd", s, Env{Accel: tcgHost, FDs: FDs{QMP: 3, SerialLog: 5, Agent: 6}}, ErrInvalidEnv},
		{"no log fd", s, Env{Accel: tcgHost, FDs: FDs{QMP: 3, Serial: 4, Agent: 6}}, ErrInvalidEnv},
		{"no agent fd", s, Env{Accel: tcgHost, FDs: FDs{QMP: 3, Serial: 4, SerialLog: 5}}, ErrInvalidEnv},
		{"no decision", s, Env{FDs: fullFDs()}, ErrInvalidEnv},
		{"kvm wanted, not usable", func() Spec { x := s; x.Accel = AccelKVM; return x }(), Env{Accel: tcgHost, FDs: fullFDs()}, ErrKVMUnavailable},
		{"host cpu under tcg", func() Spec { x := s; x.CPU.Model = "host"; return x }(), Env{Accel: tcgHost, FDs: fullFDs()}, ErrInvalidSpec},
		{"migratable without default machine", func() Spec { x := s; x.Migratable = true; return x }(), Env{Accel: tcgHost, FDs: fullFDs()}, ErrInvalidEnv},
		{"comma kernel without fd", func() Spec { x := s; x.Boot.Kernel = "/a,b/k"; return x }(), Env{Accel: tcgHost, FDs: fullFDs()}, ErrInvalidEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildArgv(&tt.spec, tt.env)
			if !errors.Is(err, tt.want) {
				t.Fatalf("BuildArgv error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name         string
		spec         Spec
		host         accel.Decision
		accel        accel.Kind
		machine, cpu string
	}{
		{"tcg default", Spec{}, tcgHost, accel.TCG, "q35", "max"},
		{"kvm default", Spec{}, kvmHost, accel.KVM, "q35", "host"},
		{"forced tcg on kvm host", Spec{Accel: AccelTCG}, kvmHost, accel.TCG, "q35", "max"},
		{"migratable", Spec{Migratable: true}, tcgHost, accel.TCG, "pc-q35-7.2", DefaultMigratableCPU},
		{"named", Spec{Machine: "pc-q35-7.1", CPU: CPU{Model: "Skylake-Client"}}, kvmHost, accel.KVM, "pc-q35-7.1", "Skylake-Client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Resolve(&tt.spec, Env{Accel: tt.host, DefaultMachine: "pc-q35-7.2"})
			if err != nil {
				t.Fatal(err)
			}
			if r.Accel != tt.accel || r.Machine != tt.machine || r.CPUModel != tt.cpu || r.AccelReason == "" {
				t.Fatalf("Resolve = %+v, want %s %s %s with a reason", r, tt.accel, tt.machine, tt.cpu)
			}
		})
	}
}

func TestNeedsFD(t *testing.T) {
	for p, want := range map[string]bool{
		"/boot/vmlinuz-6.1.0-28-cloud-amd64": false,
		"/a/b_c+d.e":                         false,
		"/a,b/k":                             true,
		"/a b/k":                             true,
		"/a=b":                               true,
		"/a\"b":                              true,
		"/ünï":                               true,
	} {
		if got := NeedsFD(p); got != want {
			t.Errorf("NeedsFD(%q) = %v, want %v", p, got, want)
		}
	}
}
