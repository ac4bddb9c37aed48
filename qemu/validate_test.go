package qemu

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestValidateAcceptsFullSpec(t *testing.T) {
	s := fullSpec()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRejects(t *testing.T) {
	tap := os.NewFile(0, "fake-tap") // only its non-nil-ness matters to Validate
	tests := []struct {
		name  string
		mut   func(*Spec)
		field string
	}{
		{"no name", func(s *Spec) { s.Name = "" }, "name"},
		{"bad uuid", func(s *Spec) { s.UUID = "nope" }, "uuid"},
		{"pc machine", func(s *Spec) { s.Machine = "pc-i440fx-7.2" }, "machine"},
		{"unversioned migratable", func(s *Spec) { s.Migratable, s.Machine = true, "q35" }, "machine"},
		{"max cpu migratable", func(s *Spec) { s.Migratable, s.CPU.Model = true, "max" }, "cpu.model"},
		{"accel", func(s *Spec) { s.Accel = "hvf" }, "accel"},
		{"tb-size", func(s *Spec) { s.TCGCacheMiB = -1 }, "tcgCacheMiB"},
		{"balloon stats period", func(s *Spec) { s.Balloon = &Balloon{StatsPeriodSeconds: -1} }, "balloon.statsPeriodSeconds"},
		{"memory", func(s *Spec) { s.MemoryMiB = 8 }, "memoryMiB"},
		{"vcpus", func(s *Spec) { s.CPU = CPU{Sockets: 2, Cores: 200} }, "cpu"},
		{"negative cores", func(s *Spec) { s.CPU.Cores = -1 }, "cpu"},
		{"initrd without kernel", func(s *Spec) { s.Boot.Kernel = "" }, "boot.kernel"},
		{"relative kernel", func(s *Spec) { s.Boot.Kernel = "vmlinuz" }, "boot.kernel"},
		{"dup disk id", func(s *Spec) { s.Disks[1].ID = "root" }, "disks[1].id"},
		{"disk/nic id clash", func(s *Spec) { s.NICs[0].ID = "root" }, "nics[0].id"},
		{"dup boot index", func(s *Spec) { s.Disks[3].BootIndex = 1 }, "disks[3].bootIndex"},
		{"disk/nic boot index clash", func(s *Spec) { s.NICs[0].BootIndex = 1 }, "nics[0].bootIndex"},
		{"boot index too big", func(s *Spec) { s.Disks[3].BootIndex = MaxBootIndex + 1 }, "disks[3].bootIndex"},
		{"negative nic boot index", func(s *Spec) { s.NICs[0].BootIndex = -1 }, "nics[0].bootIndex"},
		{"virtio cdrom", func(s *Spec) { s.Disks[1].Bus = BusVirtio }, "disks[1].bus"},
		{"native aio cached", func(s *Spec) { s.Disks[0].Cache = CacheWriteback }, "disks[0].aio"},
		{"format", func(s *Spec) { s.Disks[0].Format = "vmdk" }, "disks[0].format"},
		{"cache", func(s *Spec) { s.Disks[0].Cache = "fast" }, "disks[0].cache"},
		{"serial too long", func(s *Spec) { s.Disks[3].Serial = strings.Repeat("A", 21) }, "disks[3].serial"},
		{"fdset path", func(s *Spec) { s.Disks[0].Path = "/dev/fdset/3" }, "disks[0].path"},
		{"port beyond layout", func(s *Spec) { s.Disks[0].Port = 12 }, "disks[0].port"},
		{"port clash", func(s *Spec) { s.Disks[0].Port, s.NICs[0].Port = 3, 3 }, "nics[0].port"},
		{"sata port range", func(s *Spec) { s.Disks[1].Port = 7 }, "disks[1].port"},
		{"too many sata", func(s *Spec) {
			for i := 0; i < 5; i++ {
				s.Disks = append(s.Disks, Disk{ID: "sata" + string(rune('a'+i)), Path: "/x", Bus: BusSATA})
			}
		}, "disks[8].port"},
		{"too many root ports", func(s *Spec) { s.HotplugPorts = MaxRootPorts }, "hotplugPorts"},
		{"mac multicast", func(s *Spec) { s.NICs[0].MAC = "01:00:5e:00:00:01" }, "nics[0].mac"},
		{"mac dashes", func(s *Spec) { s.NICs[0].MAC = "52-54-00-12-34-56" }, "nics[0].mac"},
		{"no tap", func(s *Spec) { s.NICs[0].TapName = "" }, "nics[0].tapFDs"},
		{"tap fd and name", func(s *Spec) { s.NICs[0].TapFDs = []*os.File{tap} }, "nics[0].tapName"},
		{"nil tap fd", func(s *Spec) { s.NICs[0].TapName, s.NICs[0].TapFDs = "", []*os.File{nil} }, "nics[0].tapFDs[0]"},
		{"queues mismatch", func(s *Spec) { s.NICs[0].TapName, s.NICs[0].TapFDs = "", []*os.File{tap} }, "nics[0].queues"},
		{"model", func(s *Spec) { s.NICs[0].Model = "e1000" }, "nics[0].model"},
		{"same socket", func(s *Spec) { s.Agent.Socket = s.Serial.Socket }, "agent.socket"},
		{"socket too long", func(s *Spec) { s.Agent.Socket = "/" + strings.Repeat("s", 120) }, "agent.socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fullSpec()
			tt.mut(&s)
			err := s.Validate()
			var se *SpecError
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate = %v, want a *SpecError", err)
			}
			if se.Field != tt.field {
				t.Fatalf("Validate blamed %q (%v), want %q", se.Field, err, tt.field)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	s := Spec{
		Disks: []Disk{
			{ID: "a"}, {ID: "b", Port: 1}, {ID: "s1", Bus: BusSCSI}, {ID: "s2", Bus: BusSCSI, Port: 1},
			{ID: "h1", Bus: BusSATA},
		},
		NICs:         []NIC{{ID: "n1"}, {ID: "n2", Port: 5}},
		HotplugPorts: 2,
	}
	l, err := s.layout()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a": 2, "b": 1, "s1": 2, "s2": 1, "h1": 1, "n1": 3, "n2": 5}
	if l.rootPorts != 6 {
		t.Errorf("rootPorts = %d, want 6 (4 pcie devices + 2 hotplug)", l.rootPorts)
	}
	for id, p := range want {
		if l.slot[id] != p {
			t.Errorf("slot[%s] = %d, want %d (layout %v)", id, l.slot[id], p, l.slot)
		}
	}
}
