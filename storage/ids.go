package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

var (
	// dnsLabelRe is what the API allows for volume names.
	dnsLabelRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// qemuIDRe is qemu.Disk's id alphabet (see qemu.Spec.Validate).
	qemuIDRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,27}$`)
)

const (
	maxIDLen   = 28
	idHashLen  = 8
	idPrefixLn = maxIDLen - idHashLen - 1
)

// DiskID is the QEMU id of a volume's disk: the name itself when it fits QEMU's rules
// ([a-z][a-z0-9-]{0,27}), else a readable prefix plus "-" and 8 hex digits of the name's
// SHA-256 ("0data" → "v0data-1c5c2b7e", a 63-character name → its first 19 characters + hash).
// Distinct names give distinct ids unless their hashes collide, which Plan detects.
func DiskID(volume string) string {
	if qemuIDRe.MatchString(volume) {
		return volume
	}
	sum := sha256.Sum256([]byte(volume))
	prefix := volume
	if prefix == "" || prefix[0] < 'a' || prefix[0] > 'z' {
		prefix = "v" + prefix
	}
	var b strings.Builder
	for _, r := range prefix {
		if b.Len() == idPrefixLn {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.TrimRight(b.String(), "-") + "-" + hex.EncodeToString(sum[:])[:idHashLen]
}
