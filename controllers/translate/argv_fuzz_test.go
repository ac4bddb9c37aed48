package translate

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/qemu/optstest"
)

// FuzzTranslateArgv drives user-controlled VMI strings (namespace, name, kernel arguments, CPU
// model, machine type, firmware UUID, disk names and serials, a SATA host disk's path, the
// interface's MAC and model) through Translate and qemu.BuildArgv. Translate either refuses
// with a *SpecError, or every argv element parses back (optstest.Parse: QEMU's ',' / ',,' / '='
// rules) to exactly the devices and drives the spec asks for, with allow-listed keys only,
// and no user string outside a JSON value or -append.
//
//	go test ./controllers/translate -run '^$' -fuzz FuzzTranslateArgv -fuzztime 60s
func FuzzTranslateArgv(f *testing.F) {
	f.Add("default", "demo", "console=ttyS0", "", "", "", "root", "serial-1", "disk.img", "02:00:00:00:00:02", "virtio")
	f.Add("ns", "vm,id=evil", "a,b=c -device x", "max,+vmx", "q35,accel=kvm", testUID, "d,id=x", "s,drive=x", "a,b/c.img", "02:00:00:00:00:02,x", "e1000,netdev=y")
	f.Add("a", "b", "", "Skylake-Client", "pc-q35-7.2", "", "x", "", "x", "", "")
	f.Add("a", "b", "x\x00y", "h\ny", "", "not-a-uuid", "d", "ser ial", "../etc/passwd", "ff:ff:ff:ff:ff:ff", "virtio-net-pci")
	f.Fuzz(func(t *testing.T, ns, name, cmdline, cpuModel, machine, uuid, disk, serial, hostPath, mac, model string) {
		translateArgv(t, ns, name, cmdline, cpuModel, machine, uuid, disk, serial, hostPath, mac, model)
	})
}

// TestTranslateArgvSeed: the fuzz body's success path is reached (a valid VMI translates and
// its argv passes the checks), so FuzzTranslateArgv cannot pass by refusing everything.
func TestTranslateArgvSeed(t *testing.T) {
	if !translateArgv(t, "default", "demo", "console=ttyS0 a,b=c", "", "", "", "root", "serial-1", "disk.img", "02:00:00:00:00:02", "virtio") {
		t.Fatal("a valid VMI did not translate")
	}
}

// translateArgv runs one case; it reports whether Translate accepted the VMI.
func translateArgv(t *testing.T, ns, name, cmdline, cpuModel, machine, uuid, disk, serial, hostPath, mac, model string) bool {
	t.Helper()
	vmi := baseVMI()
	vmi.Namespace, vmi.Name = ns, name
	d := &vmi.Spec.Domain
	d.Firmware.KernelBoot.KernelArgs = cmdline
	d.Firmware.UUID = types.UID(uuid)
	if cpuModel != "" {
		d.CPU = &vmletv1.CPU{Model: cpuModel}
	}
	if machine != "" {
		d.Machine = &vmletv1.Machine{Type: machine}
	}
	vmi.Spec.Volumes = []vmletv1.Volume{
		containerDisk(disk, "registry:5000/kubevirt/cirros:devel"),
		{Name: "host", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{Path: "/var/data/" + hostPath, Type: vmletv1.HostDiskExists}}},
	}
	root := virtioDisk(disk)
	root.Serial = serial
	sata := vmletv1.Disk{Name: "host", Serial: serial, DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusSATA}}}
	d.Devices.Disks = []vmletv1.Disk{root, sata}
	nic := masqIface("default")
	nic.MacAddress, nic.Model = mac, model
	d.Devices.Interfaces = []vmletv1.Interface{nic}
	pvpanic := vmletv1.PanicDevicePvpanic
	d.Devices.PanicDevices = []vmletv1.PanicDevice{{Model: &pvpanic}, {}}
	vmi.Spec.Networks = []vmletv1.Network{podNet("default")}
	vmi.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name, UID: testUID}

	des, err := Translate(vmi, storageTestEnv(), Referenced{})
	if err != nil {
		if _, ok := errors.AsType[*SpecError](err); !ok {
			t.Fatalf("Translate: %v (%T) is not a *SpecError", err, err)
		}
		return false
	}
	s := des.Spec
	args, err := qemu.BuildArgv(s, qemu.Env{Accel: accel.Decision{Accel: accel.TCG, Reason: "fuzz"},
		FDs: qemu.FDs{QMP: 3, Serial: 4, SerialLog: 5, Agent: 6, Kernel: 7, Initrd: 8}})
	if err != nil {
		t.Fatalf("BuildArgv of a translated spec: %v", err)
	}
	checkArgv(t, s, args, []string{ns, name, cmdline, cpuModel, machine, uuid, disk, serial, hostPath, mac, model})
	return true
}

// optionKeys are the keys each option-string flag (and each -device driver) may carry.
var optionKeys = map[string][]string{
	"-name": {"guest", "debug-threads"}, "-accel": {"", "tb-size"}, "-smp": {"cpus", "sockets", "cores", "threads", "maxcpus"},
	"-chardev": {"", "id", "fd", "server", "wait", "logfile", "logappend"}, "-mon": {"chardev", "mode"},
	"-add-fd": {"fd", "set"}, "-object": {"", "id", "filename", "size", "share", "mem-path"}, "-m": {"", "size", "slots", "maxmem"},
	"isa-serial": {"", "chardev", "id"}, "virtio-serial-pci": {"", "id", "bus", "addr"},
	"virtserialport": {"", "bus", "chardev", "name", "id"}, "virtio-rng-pci": {"", "rng", "id", "bus", "addr"},
	"virtio-scsi-pci": {"", "id", "bus", "addr"}, "virtio-balloon-pci": {"", "id", "bus", "addr", "free-page-reporting"},
	"pcie-root-port": {"", "id", "bus", "chassis", "port", "addr", "multifunction"}, "VGA": {"", "id", "bus", "addr"},
	"-action": {"panic"}, "pvpanic": {"", "id"}, "pvpanic-pci": {"", "id", "bus", "addr"},
}

func checkArgv(t *testing.T, s *qemu.Spec, args []string, user []string) {
	t.Helper()
	single := map[string]bool{"-S": true, "-nodefaults": true, "-no-user-config": true, "-nographic": true}
	devices := map[string]int{}
	var sataDevs, blockdevs []map[string]any
	for i := 0; i < len(args); i++ {
		flag := args[i]
		if !strings.HasPrefix(flag, "-") {
			t.Fatalf("argv[%d] %q is not a flag: a value leaked into an argument of its own", i, flag)
		}
		if single[flag] {
			continue
		}
		if i++; i >= len(args) {
			t.Fatalf("%s has no value", flag)
		}
		v := args[i]
		switch flag {
		case "-append":
			if v != s.Boot.Cmdline {
				t.Fatalf("-append %q, spec says %q", v, s.Boot.Cmdline)
			}
			continue
		case "-blockdev", "-device":
			if strings.HasPrefix(v, "{") {
				var m map[string]any
				if err := json.Unmarshal([]byte(v), &m); err != nil {
					t.Fatalf("%s %s: %v", flag, v, err)
				}
				if flag == "-device" {
					sataDevs = append(sataDevs, m)
				} else {
					blockdevs = append(blockdevs, m)
				}
				continue
			}
		case "-machine", "-cpu", "-uuid", "-kernel", "-initrd", "-incoming", "-boot", "-vnc", "-msg", "-sandbox":
			if flag == "-kernel" && v != "/dev/fd/7" && v != s.Boot.Kernel || flag == "-initrd" && v != "/dev/fd/8" && v != s.Boot.Initrd {
				t.Fatalf("%s %q", flag, v)
			}
			if flag == "-machine" && s.Machine != "" && v != s.Machine || flag == "-cpu" && s.CPU.Model != "" && v != s.CPU.Model {
				t.Fatalf("%s %q, spec says %q / %q", flag, v, s.Machine, s.CPU.Model)
			}
			if strings.ContainsAny(v, ",= \n") && flag != "-msg" && flag != "-boot" {
				t.Fatalf("%s %q carries an option separator", flag, v)
			}
			continue
		}
		vals, keys := optstest.Parse(v)
		allowed, ok := optionKeys[flag]
		if flag == "-device" {
			allowed, ok = optionKeys[vals[""]]
			devices[vals[""]]++
		}
		if !ok {
			t.Fatalf("unexpected %s %q", flag, v)
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] || !slices.Contains(allowed, k) {
				t.Fatalf("%s %q: key %q unexpected or repeated (injected)", flag, v, k)
			}
			seen[k] = true
		}
		if flag == "-name" && vals["guest"] != s.Name {
			t.Fatalf("-name guest=%q, spec says %q", vals["guest"], s.Name)
		}
		for _, u := range user {
			if len(u) >= 3 && strings.ContainsAny(u, ",=") && strings.Contains(v, u) {
				t.Fatalf("%s %q carries the user string %q", flag, v, u)
			}
		}
	}
	want := map[string]int{"virtio-scsi-pci": 1}
	if s.Serial != nil {
		want["isa-serial"] = 1
	}
	if s.Agent != nil {
		want["virtio-serial-pci"], want["virtserialport"] = 1, 1
	}
	want["pvpanic"], want["pvpanic-pci"] = 1, 1 // the VMI asks for both
	if devices["pvpanic"]+devices["pvpanic-pci"] > 0 && !slices.Contains(args, "-action") {
		t.Fatalf("panic devices without -action: %q", args)
	}
	for drv, n := range want {
		if devices[drv] != n {
			t.Fatalf("%d -device %s, want %d (devices %v)", devices[drv], drv, n, devices)
		}
	}
	if devices["pcie-root-port"] < s.HotplugPorts {
		t.Fatalf("%d root ports for %d hotplug ports", devices["pcie-root-port"], s.HotplugPorts)
	}
	var sata []qemu.Disk
	for _, d := range s.Disks {
		if d.Bus == qemu.BusSATA {
			sata = append(sata, d)
		}
	}
	if len(sataDevs) != len(sata) || len(blockdevs) != 2*len(sata) {
		t.Fatalf("%d SATA device and %d blockdev JSON values for %d SATA disks", len(sataDevs), len(blockdevs), len(sata))
	}
	for i, d := range sata {
		if got, _ := sataDevs[i]["serial"].(string); got != d.Serial || sataDevs[i]["id"] != d.ID {
			t.Fatalf("SATA device %v for disk %+v", sataDevs[i], d)
		}
		if blockdevs[2*i]["filename"] != d.Path {
			t.Fatalf("blockdev %v for path %q", blockdevs[2*i], d.Path)
		}
	}
}
