package qemu

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// resourceArgs keeps the argv pairs that CPU and memory hotplug change: -smp, -m, -object and
// the -device of vCPUs and virtio-mem.
func resourceArgs(args []string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		flag, v := args[i], args[i+1]
		switch {
		case flag == "-smp", flag == "-m", flag == "-object" && strings.HasPrefix(v, "memory-backend"),
			flag == "-device" && (strings.Contains(v, "-x86_64-cpu,") || strings.HasPrefix(v, "virtio-mem")):
			out = append(out, flag, v)
		}
	}
	return out
}

func TestResourceArgv(t *testing.T) {
	tests := []struct {
		name string
		cpu  CPU
		mem  *MemoryHotplug
		want []string
	}{
		{"no hotplug", CPU{Sockets: 2, Cores: 2}, nil,
			[]string{"-smp", "cpus=4,sockets=2,cores=2,threads=1", "-m", "256M"}},
		{"cpu hotplug, one socket", CPU{Model: "qemu64", Sockets: 1, MaxSockets: 4}, nil,
			[]string{"-smp", "cpus=1,sockets=4,cores=1,threads=1,maxcpus=4", "-m", "256M"}},
		{"cpu hotplug, boot and plugged sockets are devices", CPU{Model: "qemu64", Sockets: 2, Cores: 2, MaxSockets: 4, PluggedSockets: 1}, nil,
			[]string{"-smp", "cpus=2,sockets=4,cores=2,threads=1,maxcpus=8",
				"-device", "qemu64-x86_64-cpu,id=cpu_s1_c0_t0,socket-id=1,core-id=0,thread-id=0",
				"-device", "qemu64-x86_64-cpu,id=cpu_s1_c1_t0,socket-id=1,core-id=1,thread-id=0",
				"-device", "qemu64-x86_64-cpu,id=cpu_s2_c0_t0,socket-id=2,core-id=0,thread-id=0",
				"-device", "qemu64-x86_64-cpu,id=cpu_s2_c1_t0,socket-id=2,core-id=1,thread-id=0",
				"-m", "256M"}},
		{"cpu model type from the resolved model", CPU{Sockets: 2, MaxSockets: 2}, nil,
			[]string{"-smp", "cpus=1,sockets=2,cores=1,threads=1,maxcpus=2",
				"-device", "max-x86_64-cpu,id=cpu_s1_c0_t0,socket-id=1,core-id=0,thread-id=0", "-m", "256M"}},
		{"memory hotplug, default block", CPU{}, &MemoryHotplug{MaxMiB: 1280},
			[]string{"-smp", "cpus=1,sockets=1,cores=1,threads=1", "-m", "size=256M,maxmem=1280M",
				"-object", "memory-backend-ram,id=vmem_mem,size=1024M",
				"-device", "virtio-mem-pci,id=vmem_0,memdev=vmem_mem,requested-size=0M,block-size=2M,bus=pcie.0,addr=0x9"}},
		{"memory hotplug, migration target's requested size", CPU{}, &MemoryHotplug{MaxMiB: 512, RequestedMiB: 128, BlockMiB: 4},
			[]string{"-smp", "cpus=1,sockets=1,cores=1,threads=1", "-m", "size=256M,maxmem=512M",
				"-object", "memory-backend-ram,id=vmem_mem,size=256M",
				"-device", "virtio-mem-pci,id=vmem_0,memdev=vmem_mem,requested-size=128M,block-size=4M,bus=pcie.0,addr=0x9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			s.CPU, s.MemoryHotplug = tt.cpu, tt.mem
			args, err := BuildArgv(&s, Env{Accel: tcgHost, FDs: FDs{QMP: 3}})
			if err != nil {
				t.Fatal(err)
			}
			if got := resourceArgs(args); !slices.Equal(got, tt.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// The virtio-mem device has a fixed pcie.0 address: adding it moves no root port and no
// other device, so a migration layout stays the same.
func TestMemoryHotplugKeepsLayout(t *testing.T) {
	s := fullSpec()
	before, err := BuildArgv(&s, Env{Accel: tcgHost, BlockDevices: map[string]bool{"data": true}, FDs: fullFDs()})
	if err != nil {
		t.Fatal(err)
	}
	s.MemoryHotplug = &MemoryHotplug{MaxMiB: 1024}
	s.CPU.MaxSockets = 2
	after, err := BuildArgv(&s, Env{Accel: tcgHost, BlockDevices: map[string]bool{"data": true}, FDs: fullFDs()})
	if err != nil {
		t.Fatal(err)
	}
	strip := func(args []string) []string {
		var out []string
		for i := 0; i < len(args); i++ {
			if i+1 < len(args) && (args[i] == "-smp" || args[i] == "-m" || len(resourceArgs(args[i:i+2])) > 0) {
				i++
				continue
			}
			out = append(out, args[i])
		}
		return out
	}
	if b, a := strip(before), strip(after); !slices.Equal(b, a) {
		t.Errorf("hotplug changed other arguments:\n%q\n%q", b, a)
	}
	for i, a := range after {
		if strings.Contains(a, "addr="+addrVirtioMem+",") || strings.HasSuffix(a, "addr="+addrVirtioMem) {
			if !strings.HasPrefix(a, "virtio-mem-pci,") {
				t.Errorf("argv[%d] %q also uses the virtio-mem address", i, a)
			}
		}
	}
}

func TestValidateResourceHotplug(t *testing.T) {
	tests := []struct {
		name  string
		cpu   CPU
		mem   *MemoryHotplug
		field string // "" = valid
	}{
		{"cpu ok", CPU{Sockets: 2, MaxSockets: 4, PluggedSockets: 2}, nil, ""},
		{"plugged past max", CPU{Sockets: 2, MaxSockets: 3, PluggedSockets: 2}, nil, "cpu.maxSockets"},
		{"max below boot", CPU{Sockets: 3, MaxSockets: 2}, nil, "cpu.maxSockets"},
		{"plugged without hotplug", CPU{Sockets: 1, PluggedSockets: 1}, nil, "cpu.pluggedSockets"},
		{"negative max", CPU{MaxSockets: -1}, nil, "cpu"},
		{"too many vcpus", CPU{Cores: 4, Threads: 2, MaxSockets: 40}, nil, "cpu.maxSockets"},
		{"memory ok", CPU{}, &MemoryHotplug{MaxMiB: 512, RequestedMiB: 64}, ""},
		{"max not above boot", CPU{}, &MemoryHotplug{MaxMiB: 256}, "memoryHotplug.maxMiB"},
		{"region not a block multiple", CPU{}, &MemoryHotplug{MaxMiB: 257}, "memoryHotplug.maxMiB"},
		{"block not a power of two", CPU{}, &MemoryHotplug{MaxMiB: 512, BlockMiB: 3}, "memoryHotplug.blockMiB"},
		{"block below 2 MiB", CPU{}, &MemoryHotplug{MaxMiB: 512, BlockMiB: 1}, "memoryHotplug.blockMiB"},
		{"requested past region", CPU{}, &MemoryHotplug{MaxMiB: 512, RequestedMiB: 258}, "memoryHotplug.requestedMiB"},
		{"requested not a block multiple", CPU{}, &MemoryHotplug{MaxMiB: 512, RequestedMiB: 3}, "memoryHotplug.requestedMiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			s.CPU, s.MemoryHotplug = tt.cpu, tt.mem
			err := s.Validate()
			var se *SpecError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("valid spec rejected: %v", err)
			case tt.field == "":
			case !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec):
				t.Fatalf("got %v, want a *SpecError for %s", err, tt.field)
			case se.Field != tt.field:
				t.Errorf("field %q (%v), want %q", se.Field, err, tt.field)
			}
		})
	}
}

func TestResourceEvents(t *testing.T) {
	ev := func(name, data string) qmp.Event { return qmp.Event{Name: name, Data: []byte(data)} }
	for _, tt := range []struct {
		e      qmp.Event
		cpuID  string
		memory bool
	}{
		{ev("DEVICE_DELETED", `{"path":"/machine/peripheral/cpu_s1_c0_t0/lapic"}`), "cpu_s1_c0_t0", false},
		{ev("DEVICE_DELETED", `{"device":"cpu_s2_c1_t0","path":"/machine/peripheral/cpu_s2_c1_t0"}`), "cpu_s2_c1_t0", false},
		{ev("DEVICE_DELETED", `{"device":"data1","path":"/machine/peripheral/data1"}`), "", false},
		{ev("DEVICE_DELETED", `{"path":"/machine/peripheral/data1/virtio-backend"}`), "", false},
		{ev("DEVICE_DELETED", `{"path":"/machine/peripheral/cpu_s1_c0_t0/x/y"}`), "", false},
		{ev("MEMORY_DEVICE_SIZE_CHANGE", `{"size":134217728,"qom-path":"/machine/peripheral/vmem_0","id":"vmem_0"}`), "", true},
		{ev("MEMORY_DEVICE_SIZE_CHANGE", `{"size":0,"qom-path":"/machine/peripheral/other"}`), "", false},
	} {
		id, ok := CPUUnplugged(tt.e)
		if id != tt.cpuID || ok != (tt.cpuID != "") {
			t.Errorf("CPUUnplugged(%s %s) = %q %v, want %q", tt.e.Name, tt.e.Data, id, ok, tt.cpuID)
		}
		if got := MemorySizeChanged(tt.e); got != tt.memory {
			t.Errorf("MemorySizeChanged(%s %s) = %v", tt.e.Name, tt.e.Data, got)
		}
	}
}
