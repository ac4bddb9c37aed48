package devices

import "fmt"

// The grants map (BPF_MAP_TYPE_HASH, key mapKey, value uint32 Access bits) holds two kinds of
// entries:
//
//   - grants: Type is BPF_DEVCG_DEV_BLOCK or BPF_DEVCG_DEV_CHAR and the numbers are real or
//     keyWildcard. The program looks these up: {type,major,minor}, {type,major,*},
//     {type,*,minor}, {type,*,*}, ORing the access bits it finds.
//   - records of the static rules compiled into the program, so Recover can report them:
//     Type carries a kind in bits 8..15. The program never builds such a key, so records
//     cannot grant anything.
type mapKey struct {
	Type  uint32
	Major uint32
	Minor uint32
}

const (
	keyWildcard = ^uint32(0) // not a valid major or minor (see MaxMajor, MaxMinor)

	devBlock = 1 // BPF_DEVCG_DEV_BLOCK
	devChar  = 2 // BPF_DEVCG_DEV_CHAR
	devAll   = 3 // records only: an 'a' static rule

	kindGrant       = 0 << 8
	kindStaticAllow = 1 << 8
	kindStaticDeny  = 2 << 8
	kindMask        = 0xff << 8
	typeMask        = 0xff

	mapKeySize   = 12
	mapValueSize = 4
)

func keyNumber(n int64) uint32 {
	if n == Wildcard {
		return keyWildcard
	}
	return uint32(n)
}

func ruleNumber(n uint32) int64 {
	if n == keyWildcard {
		return Wildcard
	}
	return int64(n)
}

func typeCode(t DeviceType) uint32 {
	switch t {
	case BlockDevice:
		return devBlock
	case CharDevice:
		return devChar
	default:
		return devAll
	}
}

func codeType(c uint32) (DeviceType, bool) {
	switch c {
	case devBlock:
		return BlockDevice, true
	case devChar:
		return CharDevice, true
	case devAll:
		return AllDevices, true
	}
	return 0, false
}

// grantKeys returns the map keys a grant of r occupies: one, or two for an 'a' rule (the
// program only looks up concrete types).
func grantKeys(r Rule) []mapKey {
	maj, min := keyNumber(r.Major), keyNumber(r.Minor)
	if r.Type == AllDevices {
		return []mapKey{{devBlock, maj, min}, {devChar, maj, min}}
	}
	return []mapKey{{typeCode(r.Type), maj, min}}
}

// recordKey returns the key recording static rule r.
func recordKey(r Rule) mapKey {
	kind := uint32(kindStaticDeny)
	if r.Allow {
		kind = kindStaticAllow
	}
	return mapKey{kind | typeCode(r.Type), keyNumber(r.Major), keyNumber(r.Minor)}
}

// decodeEntry turns a map entry back into a rule and says whether it is a static record.
func decodeEntry(k mapKey, v uint32) (r Rule, static bool, err error) {
	t, ok := codeType(k.Type & typeMask)
	if !ok || k.Type&^(kindMask|typeMask) != 0 {
		return Rule{}, false, fmt.Errorf("decode grants key %+v: %w", k, ErrInvalidRule)
	}
	r = Rule{Type: t, Major: ruleNumber(k.Major), Minor: ruleNumber(k.Minor), Access: Access(v), Allow: true}
	switch k.Type & kindMask {
	case kindGrant:
		if t == AllDevices {
			return Rule{}, false, fmt.Errorf("decode grants key %+v: %w", k, ErrInvalidRule)
		}
	case kindStaticAllow:
		static = true
	case kindStaticDeny:
		static, r.Allow = true, false
	default:
		return Rule{}, false, fmt.Errorf("decode grants key %+v: %w", k, ErrInvalidRule)
	}
	if err := r.Validate(); err != nil {
		return Rule{}, false, fmt.Errorf("decode grants key %+v: %w", k, err)
	}
	return r, static, nil
}
