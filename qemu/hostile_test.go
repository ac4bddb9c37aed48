package qemu

import (
	"errors"
	"strings"
	"testing"
)

// hostile are strings an attacker controlling a VM's name, a volume name or a path would try.
var hostile = []string{
	"a,b",
	"vm,id=evil",
	",,",
	"x\"y",
	"x'y",
	"a=b",
	"a\nb",
	"a\x00b",
	"-S",
	"--daemonize",
	"-device virtio-net",
	" leading-space",
	"tab\there",
	"ünïcode",
	"../../etc/passwd",
	"rp_1",    // a vmlet-internal QEMU id
	"qmp_mon", // a vmlet-internal chardev id
	strings.Repeat("a", 10*1024),
	"",
}

// TestHostileIdentifiers: every identifier field rejects every hostile string, naming the
// field, except the few listed in mayAccept (legal in that field's alphabet); those must then
// produce a command line in which nothing was injected.
func TestHostileIdentifiers(t *testing.T) {
	fields := map[string]func(*Spec, string){
		"name":              func(s *Spec, v string) { s.Name = v },
		"uuid":              func(s *Spec, v string) { s.UUID = v },
		"machine":           func(s *Spec, v string) { s.Machine = v },
		"cpu.model":         func(s *Spec, v string) { s.CPU.Model = v },
		"disks[0].id":       func(s *Spec, v string) { s.Disks[0].ID = v },
		"disks[3].serial":   func(s *Spec, v string) { s.Disks[3].Serial = v },
		"nics[0].id":        func(s *Spec, v string) { s.NICs[0].ID = v },
		"nics[0].mac":       func(s *Spec, v string) { s.NICs[0].MAC = v },
		"nics[0].tapName":   func(s *Spec, v string) { s.NICs[0].TapName = v },
		"boot.kernel":       func(s *Spec, v string) { s.Boot.Kernel = v },
		"disks[0].path":     func(s *Spec, v string) { s.Disks[0].Path = v },
		"serial.socket":     func(s *Spec, v string) { s.Serial.Socket = v },
		"agent.socket":      func(s *Spec, v string) { s.Agent.Socket = v },
		"serial.logFile":    func(s *Spec, v string) { s.Serial.LogFile = v },
		"disks[0].format":   func(s *Spec, v string) { s.Disks[0].Format = DiskFormat(v) },
		"disks[0].cache":    func(s *Spec, v string) { s.Disks[0].Cache = CacheMode(v) },
		"nics[0].model":     func(s *Spec, v string) { s.NICs[0].Model = v },
		"boot.initrd":       func(s *Spec, v string) { s.Boot.Initrd = v },
		"disks[1].bus":      func(s *Spec, v string) { s.Disks[1].Bus = DiskBus(v) },
		"disks[0].aio":      func(s *Spec, v string) { s.Disks[0].AIO = AIOMode(v) },
		"accel":             func(s *Spec, v string) { s.Accel = AccelMode(v) },
		"serial.socket-rel": func(s *Spec, v string) { s.Serial.Socket = v }, // relative: all hostile values are
	}
	// Optional fields accept "": skip that value for them.
	optional := map[string]bool{"uuid": true, "machine": true, "cpu.model": true, "disks[3].serial": true,
		"nics[0].model": true, "disks[0].format": true, "disks[0].cache": true, "disks[1].bus": true,
		"disks[0].aio": true, "accel": true, "serial.logFile": true, "boot.initrd": true}
	legalWord := map[string]bool{"rp_1": true, "qmp_mon": true}
	mayAccept := map[string]map[string]bool{
		"name":            legalWord,
		"cpu.model":       legalWord,
		"nics[0].tapName": legalWord,
		// A disk serial only travels in device_add JSON, so option-looking text is harmless.
		"disks[3].serial": {"rp_1": true, "qmp_mon": true, "-S": true, "--daemonize": true},
	}
	for field, set := range fields {
		for _, v := range hostile {
			if v == "" && optional[field] {
				continue
			}
			if field == "nics[0].tapName" && v == "" {
				continue // means "no tap name", reported on tapFDs
			}
			t.Run(field+"/"+shorten(v, 16), func(t *testing.T) {
				s := fullSpec()
				set(&s, v)
				err := s.Validate()
				if err == nil && mayAccept[field][v] {
					args, err := BuildArgv(&s, Env{Accel: tcgHost, FDs: fullFDs()})
					if err != nil {
						t.Fatal(err)
					}
					checkArgvInvariants(t, &s, args)
					return
				}
				var se *SpecError
				if !errors.As(err, &se) {
					t.Fatalf("Validate accepted %s = %q", field, shorten(v, 40))
				}
				want := strings.TrimSuffix(field, "-rel")
				if se.Field != want {
					t.Fatalf("Validate blamed %q (%v), want %q", se.Field, err, want)
				}
				if len(se.Error()) > 400 {
					t.Fatalf("error message not shortened: %d bytes", len(se.Error()))
				}
			})
		}
	}
}

// TestHostilePaths: absolute paths with commas, quotes, '=', spaces and option-looking parts
// are legal, and still cannot inject anything: they never reach an option string (disks go
// over QMP, sockets as fds, non-plain kernel paths as /dev/fd/N).
func TestHostilePaths(t *testing.T) {
	tricky := []string{
		"/tmp/a,b",
		"/tmp/x,id=evil,server=on",
		"/tmp/x,,y",
		"/tmp/a\"b'c",
		"/tmp/a=b",
		"/tmp/-S",
		"/tmp/sp ace",
		"/tmp/ünï",
		"/tmp/json:{\"driver\":\"nbd\"}",
	}
	for _, p := range tricky {
		t.Run(shorten(p, 24), func(t *testing.T) {
			s := fullSpec()
			s.Boot.Kernel, s.Boot.Initrd = p+"/vmlinuz", p+"/initrd"
			s.Disks[0].Path = p + "/root.qcow2"
			s.Disks[1].Path = p + "/ci.iso" // SATA: on the command line, as JSON
			s.Serial.Socket, s.Serial.LogFile = p+"/s.sock", p+"/serial.log"
			s.Agent.Socket = p + "/qga.sock"
			if err := s.Validate(); err != nil {
				t.Fatalf("Validate rejected a legal path: %v", err)
			}
			fds := fullFDs()
			fds.Kernel, fds.Initrd = 7, 8
			args, err := BuildArgv(&s, Env{Accel: tcgHost, FDs: fds})
			if err != nil {
				t.Fatal(err)
			}
			checkArgvInvariants(t, &s, args)
			for i, a := range args {
				if strings.HasPrefix(a, "{") {
					continue // JSON: the path is a quoted string, checked by checkArgvInvariants
				}
				if strings.Contains(a, p) {
					t.Errorf("argv[%d] %q carries the path outside JSON", i, a)
				}
			}
			if !contains(args, "/dev/fd/7") || !contains(args, "/dev/fd/8") {
				t.Errorf("kernel/initrd not passed by fd: %q", args)
			}
		})
	}
}

// TestHostileCmdline: the kernel command line is one argv element that QEMU does not parse;
// printable text is passed verbatim, control characters and oversize lines are rejected.
func TestHostileCmdline(t *testing.T) {
	s := baseSpec()
	s.Boot.Cmdline = `console=ttyS0,115200 -device virtio-net,netdev=x "quoted" a=b,c=d`
	args, err := BuildArgv(&s, Env{Accel: tcgHost, FDs: FDs{QMP: 3}})
	if err != nil {
		t.Fatal(err)
	}
	checkArgvInvariants(t, &s, args)
	for _, bad := range []string{"a\nb", "a\x00", "tab\t", strings.Repeat("x", MaxCmdlineLen+1), "ünï"} {
		s.Boot.Cmdline = bad
		var se *SpecError
		if err := s.Validate(); !errors.As(err, &se) || se.Field != "boot.cmdline" {
			t.Errorf("cmdline %q: Validate = %v, want a boot.cmdline SpecError", shorten(bad, 20), err)
		}
	}
}
