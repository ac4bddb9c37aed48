package network

import (
	"crypto/sha256"
	"fmt"
	"net"
	"strings"
)

// ParseMAC parses a unicast Ethernet MAC written as six colon- or dash-separated hex pairs
// ("52:54:00:12:34:56", "DE-AD-00-00-BE-AF"). Multicast and all-zero addresses are rejected:
// a guest NIC cannot use them. Errors match ErrInvalidMAC.
func ParseMAC(s string) (net.HardwareAddr, error) {
	if len(s) != 17 {
		return nil, fmt.Errorf("parse mac %q: %w: want 6 hex pairs separated by ':' or '-'", s, ErrInvalidMAC)
	}
	sep := s[2]
	if sep != ':' && sep != '-' {
		return nil, fmt.Errorf("parse mac %q: %w: want 6 hex pairs separated by ':' or '-'", s, ErrInvalidMAC)
	}
	for i := 2; i < len(s); i += 3 {
		if s[i] != sep {
			return nil, fmt.Errorf("parse mac %q: %w: mixed separators", s, ErrInvalidMAC)
		}
	}
	hw, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
	if err != nil || len(hw) != 6 {
		return nil, fmt.Errorf("parse mac %q: %w: not hex", s, ErrInvalidMAC)
	}
	if hw[0]&0x01 != 0 {
		return nil, fmt.Errorf("parse mac %q: %w: multicast bit set", s, ErrInvalidMAC)
	}
	if isZero(hw) {
		return nil, fmt.Errorf("parse mac %q: %w: all zeros", s, ErrInvalidMAC)
	}
	return hw, nil
}

// GenerateMAC derives a locally administered unicast MAC from a VM's UID and an interface
// name: the same inputs always give the same MAC (so it survives restarts and migrations), and
// different interfaces of one VM, or different VMs, get different ones with overwhelming
// probability (46 bits of a SHA-256).
func GenerateMAC(uid, iface string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("vmlet-mac\x00" + uid + "\x00" + iface))
	hw := net.HardwareAddr(sum[:6])
	hw[0] = hw[0]&0xfc | 0x02 // locally administered, unicast
	return hw
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
