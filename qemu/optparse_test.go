package qemu

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu/optstest"
)

var qemuIDRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]*$`)

// Allowed keys per flag (option-string flags) and per -device driver.
var (
	flagKeys = map[string][]string{
		"-msg":     {"timestamp"},
		"-name":    {"guest", "debug-threads"},
		"-accel":   {"", "tb-size"},
		"-smp":     {"cpus", "sockets", "cores", "threads"},
		"-chardev": {"", "id", "fd", "server", "wait", "logfile", "logappend"},
		"-mon":     {"chardev", "mode"},
		"-add-fd":  {"fd", "set"},
		"-object":  {"", "id", "filename"},
		"-action":  {"panic"},
	}
	deviceKeys = map[string][]string{
		"isa-serial":         {"", "chardev", "id"},
		"virtio-serial-pci":  {"", "id", "bus", "addr"},
		"virtserialport":     {"", "bus", "chardev", "name", "id"},
		"virtio-rng-pci":     {"", "rng", "id", "bus", "addr"},
		"virtio-scsi-pci":    {"", "id", "bus", "addr"},
		"virtio-balloon-pci": {"", "id", "bus", "addr", "free-page-reporting"},
		"pcie-root-port":     {"", "id", "bus", "chassis", "port", "addr", "multifunction"},
		"VGA":                {"", "id", "bus", "addr"},
		"pvpanic":            {"", "id"},
		"pvpanic-pci":        {"", "id", "bus", "addr"},
	}
	jsonKeys = map[string][]string{
		"-blockdev": {"driver", "node-name", "filename", "aio", "cache", "read-only", "file"},
		"-device":   {"driver", "id", "drive", "bus", "serial", "bootindex", "write-cache", "scsi-id", "lun", "addr"},
	}
	singleValue = map[string]*regexp.Regexp{
		"-machine":  machineRe,
		"-cpu":      cpuModelRe,
		"-m":        regexp.MustCompile(`^[0-9]+M$`),
		"-uuid":     regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`),
		"-kernel":   regexp.MustCompile(`^(/dev/fd/[0-9]+|/[A-Za-z0-9._/+-]*)$`),
		"-initrd":   regexp.MustCompile(`^(/dev/fd/[0-9]+|/[A-Za-z0-9._/+-]*)$`),
		"-append":   regexp.MustCompile(`^[\x20-\x7e]*$`),
		"-incoming": regexp.MustCompile(`^defer$`),
		"-boot":     regexp.MustCompile(`^strict=on$`),
		"-vnc":      regexp.MustCompile(`^none$`), // no listener: clients come over QMP
	}
)

// checkOptionValue fails the test unless value is exactly what vmlet means to give flag:
// option strings carry only allow-listed keys with well-formed ids, JSON values only
// allow-listed keys, and single values match their pattern.
func checkOptionValue(t *testing.T, flag, value string) {
	t.Helper()
	if re, ok := singleValue[flag]; ok {
		if !re.MatchString(value) {
			t.Errorf("%s %q does not match %s", flag, value, re)
		}
		return
	}
	if strings.HasPrefix(value, "{") {
		allowed, ok := jsonKeys[flag]
		if !ok {
			t.Errorf("unexpected JSON value for %s: %q", flag, value)
			return
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(value), &m); err != nil {
			t.Errorf("%s value is not JSON: %v", flag, err)
			return
		}
		for k := range m {
			if !contains(allowed, k) {
				t.Errorf("%s JSON has unexpected key %q: %s", flag, k, value)
			}
		}
		return
	}
	opts, keys := optstest.Parse(value)
	allowed, ok := flagKeys[flag]
	if flag == "-device" {
		allowed, ok = deviceKeys[opts[""]]
	}
	if !ok {
		t.Errorf("unexpected option string for %s: %q", flag, value)
		return
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !contains(allowed, k) {
			t.Errorf("%s %q: unexpected key %q (injected?)", flag, value, k)
		}
		if seen[k] {
			t.Errorf("%s %q: key %q twice (injected?)", flag, value, k)
		}
		seen[k] = true
	}
	if id, ok := opts["id"]; ok && !qemuIDRe.MatchString(id) {
		t.Errorf("%s %q: malformed id %q", flag, value, id)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestParseOpts(t *testing.T) {
	m, keys := optstest.Parse("socket,id=a,,b,path=x=y")
	if m[""] != "socket" || m["id"] != "a,b" || m["path"] != "x=y" || len(keys) != 3 {
		t.Fatalf("parseOpts = %v %v", m, keys)
	}
}
