package network

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func validSpec() *Spec {
	return &Spec{
		UID:        "0b5a7f9e-1c1d-4c7e-9a43-2f6f1d0c1a11",
		Interfaces: []Interface{{Name: "default", Binding: BindingMasquerade, Ports: []Port{{Port: 22}, {Port: 53, Protocol: ProtocolUDP}, {Port: 53}}}},
		Networks:   []Network{{Name: "default", Pod: true}},
	}
}

func TestValidate(t *testing.T) {
	if err := validSpec().Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(*Spec)
		field  string
		want   error
	}{
		{"multicast mac", func(s *Spec) { s.Interfaces[0].MAC = "01:00:5e:00:00:01" }, "interfaces[0].macAddress", ErrInvalidMAC},
		{"zero mac", func(s *Spec) { s.Interfaces[0].MAC = "00:00:00:00:00:00" }, "interfaces[0].macAddress", ErrInvalidMAC},
		{"short mac", func(s *Spec) { s.Interfaces[0].MAC = "52:54:00:12:34" }, "interfaces[0].macAddress", ErrInvalidMAC},
		{"mixed separators", func(s *Spec) { s.Interfaces[0].MAC = "52:54-00:12:34:56" }, "interfaces[0].macAddress", ErrInvalidMAC},
		{"non-hex mac", func(s *Spec) { s.Interfaces[0].MAC = "52:54:00:12:34:zz" }, "interfaces[0].macAddress", ErrInvalidMAC},
		{"port 0", func(s *Spec) { s.Interfaces[0].Ports[0].Port = 0 }, "interfaces[0].ports[0].port", ErrInvalidPort},
		{"port 65536", func(s *Spec) { s.Interfaces[0].Ports[0].Port = 65536 }, "interfaces[0].ports[0].port", ErrInvalidPort},
		{"duplicate port", func(s *Spec) { s.Interfaces[0].Ports[2].Protocol = ProtocolUDP }, "interfaces[0].ports[2].port", ErrInvalidPort},
		{"protocol", func(s *Spec) { s.Interfaces[0].Ports[0].Protocol = "SCTP" }, "interfaces[0].ports[0].protocol", ErrInvalidProtocol},
		{"lowercase protocol", func(s *Spec) { s.Interfaces[0].Ports[0].Protocol = "tcp" }, "interfaces[0].ports[0].protocol", ErrInvalidProtocol},
		{"duplicate interface", func(s *Spec) { s.Interfaces = append(s.Interfaces, s.Interfaces[0]) }, "interfaces[1].name", ErrDuplicateInterface},
		{"unknown network", func(s *Spec) { s.Interfaces[0].Name = "blue" }, "interfaces[0].name", ErrUnknownNetwork},
		{"non-pod network", func(s *Spec) { s.Networks[0].Pod = false }, "networks[0]", ErrUnknownNetwork},
		{"two pod networks", func(s *Spec) { s.Networks = append(s.Networks, Network{Name: "other", Pod: true}) }, "networks[1]", ErrDuplicateInterface},
		{"no binding", func(s *Spec) { s.Interfaces[0].Binding = "" }, "interfaces[0].binding", ErrUnsupportedBinding},
		{"sriov", func(s *Spec) { s.Interfaces[0].Binding = "sriov" }, "interfaces[0].binding", ErrUnsupportedBinding},
		{"bridge with ports", func(s *Spec) { s.Interfaces[0].Binding = BindingBridge }, "interfaces[0].ports", ErrUnsupportedBinding},
		{"bad interface name", func(s *Spec) { s.Interfaces[0].Name = "Default"; s.Networks[0].Name = "Default" }, "networks[0].name", ErrInvalidSpec},
		{"guest cidr v6", func(s *Spec) { s.Networks[0].GuestCIDR = netip.MustParsePrefix("fd00::/64") }, "networks[0].guestCIDR", ErrInvalidSpec},
		{"guest cidr /31", func(s *Spec) { s.Networks[0].GuestCIDR = netip.MustParsePrefix("10.9.0.0/31") }, "networks[0].guestCIDR", ErrInvalidSpec},
		{"pod interface name", func(s *Spec) { s.Networks[0].PodInterface = "eth0; rm" }, "networks[0].podInterface", ErrInvalidSpec},
		{"no uid", func(s *Spec) { s.UID = "" }, "uid", ErrInvalidSpec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := validSpec()
			c.mutate(s)
			err := s.Validate()
			if !errors.Is(err, c.want) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate = %v, want %v", err, c.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("first field error %+v, want field %s", fe, c.field)
			}
			if _, err := PlanBindings(s, &PodState{}); !errors.Is(err, c.want) {
				t.Errorf("PlanBindings = %v, want %v", err, c.want)
			}
		})
	}
}

// TestValidateReportsAll: every problem is reported at once, not only the first.
func TestValidateReportsAll(t *testing.T) {
	s := validSpec()
	s.Interfaces[0].MAC = "ff:ff:ff:ff:ff:ff"
	s.Interfaces[0].Ports[0].Port = -1
	err := s.Validate()
	for _, want := range []error{ErrInvalidMAC, ErrInvalidPort} {
		if !errors.Is(err, want) {
			t.Errorf("Validate = %v, missing %v", err, want)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 2 {
		t.Errorf("%d errors reported, want 2:\n%v", n, err)
	}
}

func TestParseMAC(t *testing.T) {
	for in, want := range map[string]string{
		"52:54:00:12:34:56": "52:54:00:12:34:56",
		"DE-AD-00-00-BE-AF": "de:ad:00:00:be:af",
		"02:00:00:00:00:01": "02:00:00:00:00:01",
	} {
		hw, err := ParseMAC(in)
		if err != nil || hw.String() != want {
			t.Errorf("ParseMAC(%q) = %v, %v; want %s", in, hw, err, want)
		}
	}
	for _, in := range []string{"", "52:54:00:12:34:56:78", "5254.0012.3456", "ff:ff:ff:ff:ff:ff", "33:33:00:00:00:01", "52:54:00:12:34:5g"} {
		if _, err := ParseMAC(in); !errors.Is(err, ErrInvalidMAC) {
			t.Errorf("ParseMAC(%q) = %v, want ErrInvalidMAC", in, err)
		}
	}
}

func TestGenerateMAC(t *testing.T) {
	a := GenerateMAC("uid-1", "default")
	if b := GenerateMAC("uid-1", "default"); a.String() != b.String() {
		t.Errorf("not stable: %s vs %s", a, b)
	}
	seen := map[string]bool{}
	for _, uid := range []string{"uid-1", "uid-2", "uid-3"} {
		for _, ifc := range []string{"default", "blue", "red"} {
			hw := GenerateMAC(uid, ifc)
			if hw[0]&0x01 != 0 || hw[0]&0x02 == 0 {
				t.Errorf("%s: want a locally administered unicast MAC", hw)
			}
			if _, err := ParseMAC(hw.String()); err != nil {
				t.Errorf("generated %s does not validate: %v", hw, err)
			}
			if seen[hw.String()] {
				t.Errorf("%s generated twice", hw)
			}
			seen[hw.String()] = true
		}
	}
}
