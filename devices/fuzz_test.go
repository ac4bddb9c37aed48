package devices

import (
	"encoding/binary"
	"testing"
)

// FuzzCompile decodes rule sets, grants and requests from the fuzzer's bytes and requires the
// emitted bytecode (run by interp) to decide every request like Evaluate. The kernel cannot be
// the oracle here: BPF_PROG_TEST_RUN is not implemented for BPF_PROG_TYPE_CGROUP_DEVICE
// (TestKernelHasNoTestRun); TestKernelMatchesEvaluate checks a bounded sample with real opens.
//
//	go test ./devices -run '^$' -fuzz FuzzCompile -fuzztime 60s
func FuzzCompile(f *testing.F) {
	f.Add([]byte{0x02, 0x01, 0x03, 0x06, 0x01, 0x02, 0x01, 0x03, 0x06})
	f.Add([]byte{0x03, 0xff, 0xff, 0x07, 0x81, 0x02, 0x0a, 0xe8, 0x06, 0x00, 0x01, 0x0a, 0x00, 0xe8, 0x00, 0x06})
	f.Fuzz(func(t *testing.T, data []byte) {
		static, grants, reqs := decodeCase(data)
		checkCase(t, static, grants, reqs)
	})
}

// decodeCase reads: count byte (static rules low nibble, grants high nibble), then 5 bytes per
// rule (type, major index or value, minor, access|allow<<7), then 7-byte requests to the end.
func decodeCase(data []byte) (static, grants []Rule, reqs []Request) {
	if len(data) == 0 {
		return nil, nil, nil
	}
	nStatic, nGrants := int(data[0]&0x0f), int(data[0]>>4)
	data = data[1:]
	num := func(b []byte, set []int64, max int64) int64 {
		v := int64(binary.LittleEndian.Uint16(b))
		if v < int64(len(set))*256 {
			return set[int(v)%len(set)]
		}
		return v % (max + 1)
	}
	rule := func(b []byte) Rule {
		return Rule{
			Type:   types[int(b[0])%len(types)],
			Major:  num(b[1:3], majors, MaxMajor),
			Minor:  num(b[3:5], minors, MaxMinor),
			Access: Access(1 + int(b[0]>>2)%7),
			Allow:  b[0]&0x80 != 0,
		}
	}
	for i := 0; i < nStatic+nGrants && len(data) >= 5; i++ {
		r := rule(data[:5])
		data = data[5:]
		if i < nStatic {
			static = append(static, r)
		} else {
			r.Allow = true
			grants = append(grants, r)
		}
	}
	for len(data) >= 7 && len(reqs) < 64 {
		reqs = append(reqs, Request{
			Type:   types[int(data[0])%2],
			Major:  uint32(num(data[1:3], majors[1:], MaxMajor)),
			Minor:  uint32(num(data[3:5], minors[1:], MaxMinor)),
			Access: Access(data[5] & 0x0f),
		})
		data = data[7:]
	}
	return static, grants, reqs
}
