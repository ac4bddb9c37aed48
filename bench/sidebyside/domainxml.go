package main

import (
	"encoding/xml"
	"fmt"
)

// DomainXML returns the libvirt domain definition of g, as close to vmlet's command line as
// libvirt allows (see BENCHMARKS.md for what it adds anyway):
//
//   - <domain type='qemu'>: TCG; <cpu mode='maximum'/> is -cpu max; <tcg><tb-cache> is tb-size;
//   - <memballoon model='none'/>, <controller type='usb' model='none'/>, no graphics, video,
//     sound or network: libvirt's defaults that can be switched off are;
//   - the serial console is a unix socket QEMU serves (mode='bind') with a log file, like the
//     launcher's console.sock + serial.log; the guest agent channel a unix socket on
//     virtio-serial at the same pcie.0 slot (0x5) as vmlet's; one pcie-root-port at vmlet's
//     first root-port address (slot 0x10).
//
// It is pure.
func DomainXML(g Guest) (string, error) {
	d := xmlDomain{
		Type: "qemu",
		Name: g.Name,
		Memory: xmlMemory{
			Unit:  "MiB",
			Value: g.MemoryMiB,
		},
		VCPU: g.VCPUs,
		OS: xmlOS{
			Type:    xmlOSType{Arch: "x86_64", Machine: g.Machine, Value: "hvm"},
			Kernel:  g.Kernel,
			Initrd:  g.Initrd,
			Cmdline: g.Cmdline,
		},
		Features:   xmlFeatures{ACPI: &struct{}{}},
		CPU:        xmlCPU{Mode: "maximum"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: xmlDevices{
			Emulator: "/usr/bin/qemu-system-x86_64",
			Controllers: []xmlController{
				{Type: "usb", Model: "none"},
				{Type: "virtio-serial", Index: ptr(0), Address: &xmlAddress{Type: "pci", Domain: "0x0000", Bus: "0x00", Slot: "0x05", Function: "0x0"}},
			},
			Serial: xmlChardev{
				Type:   "unix",
				Source: xmlSource{Mode: "bind", Path: g.ConsoleSocket},
				Log:    logFile(g.ConsoleLog),
				Target: xmlTarget{Type: "isa-serial", Port: ptr(0)},
			},
			Channel: xmlChardev{
				Type:   "unix",
				Source: xmlSource{Mode: "bind", Path: g.AgentSocket},
				Target: xmlTarget{Type: "virtio", Name: "org.qemu.guest_agent.0"},
			},
			Memballoon: xmlModel{Model: "none"},
		},
	}
	for p := 1; p <= hotplugPorts; p++ {
		fn := p - 1
		c := xmlController{Type: "pci", Index: ptr(p), Model: "pcie-root-port",
			Target:  &xmlCtrlTarget{Chassis: p, Port: fmt.Sprintf("0x%x", 0x10+p-1)},
			Address: &xmlAddress{Type: "pci", Domain: "0x0000", Bus: "0x00", Slot: fmt.Sprintf("0x%02x", 0x10+fn/8), Function: fmt.Sprintf("0x%x", fn%8)}}
		if fn%8 == 0 {
			c.Address.Multifunction = "on"
		}
		d.Devices.Controllers = append(d.Devices.Controllers, c)
	}
	if g.TCGCacheMiB > 0 {
		d.Features.TCG = &xmlTCG{TBCache: xmlMemory{Unit: "MiB", Value: g.TCGCacheMiB}}
	}
	out, err := xml.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", fmt.Errorf("marshal domain xml: %w", err)
	}
	return string(out) + "\n", nil
}

func ptr[T any](v T) *T { return &v }

func logFile(path string) *xmlLog {
	if path == "" {
		return nil
	}
	return &xmlLog{File: path, Append: "on"}
}

type xmlDomain struct {
	XMLName    xml.Name    `xml:"domain"`
	Type       string      `xml:"type,attr"`
	Name       string      `xml:"name"`
	Memory     xmlMemory   `xml:"memory"`
	VCPU       int         `xml:"vcpu"`
	OS         xmlOS       `xml:"os"`
	Features   xmlFeatures `xml:"features"`
	CPU        xmlCPU      `xml:"cpu"`
	OnPoweroff string      `xml:"on_poweroff"`
	OnReboot   string      `xml:"on_reboot"`
	OnCrash    string      `xml:"on_crash"`
	Devices    xmlDevices  `xml:"devices"`
}

type xmlMemory struct {
	Unit  string `xml:"unit,attr"`
	Value int    `xml:",chardata"`
}

type xmlOS struct {
	Type    xmlOSType `xml:"type"`
	Kernel  string    `xml:"kernel"`
	Initrd  string    `xml:"initrd,omitempty"`
	Cmdline string    `xml:"cmdline,omitempty"`
}

type xmlOSType struct {
	Arch    string `xml:"arch,attr"`
	Machine string `xml:"machine,attr"`
	Value   string `xml:",chardata"`
}

type xmlFeatures struct {
	ACPI *struct{} `xml:"acpi"`
	TCG  *xmlTCG   `xml:"tcg"`
}

type xmlTCG struct {
	TBCache xmlMemory `xml:"tb-cache"`
}

type xmlCPU struct {
	Mode string `xml:"mode,attr"`
}

type xmlDevices struct {
	Emulator    string          `xml:"emulator"`
	Controllers []xmlController `xml:"controller"`
	Serial      xmlChardev      `xml:"serial"`
	Channel     xmlChardev      `xml:"channel"`
	Memballoon  xmlModel        `xml:"memballoon"`
}

type xmlController struct {
	Type    string         `xml:"type,attr"`
	Index   *int           `xml:"index,attr"`
	Model   string         `xml:"model,attr,omitempty"`
	Target  *xmlCtrlTarget `xml:"target"`
	Address *xmlAddress    `xml:"address"`
}

type xmlCtrlTarget struct {
	Chassis int    `xml:"chassis,attr"`
	Port    string `xml:"port,attr"`
}

type xmlAddress struct {
	Type          string `xml:"type,attr"`
	Domain        string `xml:"domain,attr"`
	Bus           string `xml:"bus,attr"`
	Slot          string `xml:"slot,attr"`
	Function      string `xml:"function,attr"`
	Multifunction string `xml:"multifunction,attr,omitempty"`
}

type xmlChardev struct {
	Type   string    `xml:"type,attr"`
	Source xmlSource `xml:"source"`
	Log    *xmlLog   `xml:"log"`
	Target xmlTarget `xml:"target"`
}

type xmlSource struct {
	Mode string `xml:"mode,attr"`
	Path string `xml:"path,attr"`
}

type xmlLog struct {
	File   string `xml:"file,attr"`
	Append string `xml:"append,attr"`
}

type xmlTarget struct {
	Type string `xml:"type,attr"`
	Port *int   `xml:"port,attr"`
	Name string `xml:"name,attr,omitempty"`
}

type xmlModel struct {
	Model string `xml:"model,attr"`
}
