package devices

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// interp runs the bytecode Compile emits, after marshalling it the way the loader does
// (jumps resolved, map fds encoded), on a struct bpf_cgroup_dev_ctx. It decodes raw 8-byte
// instruction slots itself and implements the eBPF subset a device program can use plus
// bpf_map_lookup_elem on a Go map, so the fuzz test compares the emitted code, not the
// compiler's intent, against Evaluate. Anything else is an error, not a guess.
type interp struct {
	raw  []byte
	maps map[int32]map[mapKey]uint32 // by fd encoded in ld_imm64
}

// Address space: region<<40 | offset.
const (
	regionCtx   = 1
	regionStack = 2
	regionMap   = 3
	regionValue = 4 // regionValue+i for the i-th lookup result
	stackSize   = 512
	fakeMapFD   = 77
)

type fakeFD int

func (f fakeFD) FD() int { return int(f) }

// newInterp marshals insns with the grants map symbol bound to fake fd 77 holding grants.
func newInterp(insns asm.Instructions, grants map[mapKey]uint32) (*interp, error) {
	insns = append(asm.Instructions(nil), insns...) // Marshal rewrites its receiver
	if refs := insns.ReferenceOffsets()[GrantsMap]; len(refs) > 0 {
		if err := insns.AssociateMap(GrantsMap, fakeFD(fakeMapFD)); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		return nil, err
	}
	return &interp{raw: buf.Bytes(), maps: map[int32]map[mapKey]uint32{fakeMapFD: grants}}, nil
}

type machine struct {
	reg    [11]uint64
	ctx    []byte
	stack  []byte
	values [][]byte
	steps  int
}

// run returns the program's R0 for the request encoded as the kernel does.
func (in *interp) run(typ, access, major, minor uint32) (uint64, error) {
	m := &machine{ctx: make([]byte, 12), stack: make([]byte, stackSize)}
	binary.LittleEndian.PutUint32(m.ctx[0:], access<<16|typ)
	binary.LittleEndian.PutUint32(m.ctx[4:], major)
	binary.LittleEndian.PutUint32(m.ctx[8:], minor)
	m.reg[1] = regionCtx << 40
	m.reg[10] = regionStack<<40 | stackSize
	n := len(in.raw) / asm.InstructionSize
	for pc := 0; ; {
		if pc < 0 || pc >= n {
			return 0, fmt.Errorf("pc %d out of program (%d slots)", pc, n)
		}
		if m.steps++; m.steps > 100000 {
			return 0, fmt.Errorf("no exit after %d steps", m.steps)
		}
		s := in.raw[pc*8 : pc*8+8]
		op, dst, src := s[0], s[1]&0xf, s[1]>>4
		off := int16(binary.LittleEndian.Uint16(s[2:]))
		imm := int32(binary.LittleEndian.Uint32(s[4:]))
		if dst > 10 || src > 10 {
			return 0, fmt.Errorf("pc %d: bad register", pc)
		}
		next := pc + 1
		switch op & 0x07 {
		case 0x04, 0x07: // ALU, ALU64
			if err := m.alu(op, dst, src, imm); err != nil {
				return 0, fmt.Errorf("pc %d: %w", pc, err)
			}
		case 0x05: // JMP
			switch op & 0xf0 {
			case 0x90: // exit
				return m.reg[0], nil
			case 0x80: // call
				if err := m.call(in, imm); err != nil {
					return 0, fmt.Errorf("pc %d: %w", pc, err)
				}
			default:
				taken, err := jump(op, m.reg[dst], m.operand(op, src, imm))
				if err != nil {
					return 0, fmt.Errorf("pc %d: %w", pc, err)
				}
				if taken {
					next = pc + 1 + int(off)
				}
			}
		case 0x01: // LDX MEM
			if op != 0x61 { // only 32-bit loads are emitted
				return 0, fmt.Errorf("pc %d: unsupported load %#x", pc, op)
			}
			v, err := m.load32(m.reg[src] + uint64(int64(off)))
			if err != nil {
				return 0, fmt.Errorf("pc %d: %w", pc, err)
			}
			m.reg[dst] = uint64(v)
		case 0x02, 0x03: // ST, STX MEM
			var v uint32
			switch op {
			case 0x62:
				v = uint32(imm)
			case 0x63:
				v = uint32(m.reg[src])
			default:
				return 0, fmt.Errorf("pc %d: unsupported store %#x", pc, op)
			}
			if err := m.store32(m.reg[dst]+uint64(int64(off)), v); err != nil {
				return 0, fmt.Errorf("pc %d: %w", pc, err)
			}
		case 0x00: // LD: only ld_imm64 of a map fd
			if op != 0x18 || src != 1 || pc+1 >= n {
				return 0, fmt.Errorf("pc %d: unsupported ld %#x src %d", pc, op, src)
			}
			if _, ok := in.maps[imm]; !ok {
				return 0, fmt.Errorf("pc %d: unknown map fd %d", pc, imm)
			}
			m.reg[dst] = regionMap<<40 | uint64(uint32(imm))
			next = pc + 2
		default:
			return 0, fmt.Errorf("pc %d: unsupported opcode %#x", pc, op)
		}
		pc = next
	}
}

func (m *machine) operand(op, src uint8, imm int32) uint64 {
	if op&0x08 != 0 {
		return m.reg[src]
	}
	return uint64(int64(imm))
}

func (m *machine) alu(op, dst, src uint8, imm int32) error {
	is64 := op&0x07 == 0x07
	a, b := m.reg[dst], m.operand(op, src, imm)
	if !is64 {
		a, b = uint64(uint32(a)), uint64(uint32(b))
	}
	var r uint64
	switch op & 0xf0 {
	case 0x00:
		r = a + b
	case 0x10:
		r = a - b
	case 0x40:
		r = a | b
	case 0x50:
		r = a & b
	case 0x60:
		r = a << (b & 63)
	case 0x70:
		r = a >> (b & 63)
	case 0xa0:
		r = a ^ b
	case 0xb0:
		r = b
	default:
		return fmt.Errorf("unsupported alu op %#x", op)
	}
	if !is64 {
		r = uint64(uint32(r))
	}
	m.reg[dst] = r
	return nil
}

func jump(op uint8, a, b uint64) (bool, error) {
	switch op & 0xf0 {
	case 0x00:
		return true, nil
	case 0x10:
		return a == b, nil
	case 0x20:
		return a > b, nil
	case 0x30:
		return a >= b, nil
	case 0x40:
		return a&b != 0, nil
	case 0x50:
		return a != b, nil
	case 0xa0:
		return a < b, nil
	case 0xb0:
		return a <= b, nil
	}
	return false, fmt.Errorf("unsupported jump %#x", op)
}

// call implements helper 1, bpf_map_lookup_elem(map, key); R1-R5 are clobbered.
func (m *machine) call(in *interp, fn int32) error {
	if fn != int32(asm.FnMapLookupElem) {
		return fmt.Errorf("unsupported helper %d", fn)
	}
	if m.reg[1]>>40 != regionMap {
		return fmt.Errorf("map_lookup_elem: r1 is not a map")
	}
	grants := in.maps[int32(uint32(m.reg[1]))]
	var k mapKey
	for i, p := range []*uint32{&k.Type, &k.Major, &k.Minor} {
		v, err := m.load32(m.reg[2] + uint64(4*i))
		if err != nil {
			return fmt.Errorf("map_lookup_elem key: %w", err)
		}
		*p = v
	}
	m.reg[0] = 0
	if v, ok := grants[k]; ok {
		buf := binary.LittleEndian.AppendUint32(nil, v)
		m.values = append(m.values, buf)
		m.reg[0] = uint64(regionValue+len(m.values)-1) << 40
	}
	for r := 1; r <= 5; r++ {
		m.reg[r] = 0xdead_0000_0000_0000 // poisoned, as the verifier would treat them
	}
	return nil
}

func (m *machine) mem(addr uint64, write bool) ([]byte, error) {
	region, off := addr>>40, addr&(1<<40-1)
	var b []byte
	switch {
	case region == regionCtx && !write:
		b = m.ctx
	case region == regionStack:
		b = m.stack
	case region >= regionValue && int(region-regionValue) < len(m.values) && !write:
		b = m.values[region-regionValue]
	default:
		return nil, fmt.Errorf("bad memory access %#x (write %v)", addr, write)
	}
	if off+4 > uint64(len(b)) {
		return nil, fmt.Errorf("memory access %#x out of bounds", addr)
	}
	return b[off : off+4], nil
}

func (m *machine) load32(addr uint64) (uint32, error) {
	b, err := m.mem(addr, false)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (m *machine) store32(addr uint64, v uint32) error {
	b, err := m.mem(addr, true)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b, v)
	return nil
}

// program compiles static with grant lookups and loads it with grants into an interpreter.
func program(static, grants []Rule) (*interp, error) {
	insns, err := Compile(static, CompileOptions{Grants: true})
	if err != nil {
		return nil, err
	}
	return newInterp(insns, grantsMapOf(static, grants))
}

// decide runs the program for req as the kernel would call it.
func (in *interp) decide(req Request) (bool, error) {
	r0, err := in.run(typeCode(req.Type), uint32(req.Access), req.Major, req.Minor)
	if err != nil {
		return false, err
	}
	if r0 > 1 {
		return false, fmt.Errorf("program returned %d", r0)
	}
	return r0 == 1, nil
}

// decide runs the program for req against static rules compiled in and grants in the map.
func decide(static, grants []Rule, req Request) (bool, error) {
	in, err := program(static, grants)
	if err != nil {
		return false, err
	}
	return in.decide(req)
}

// grantsMapOf builds the map content Filter.Grant would produce, plus static records that must
// never be found by the program's lookups.
func grantsMapOf(static, grants []Rule) map[mapKey]uint32 {
	m := map[mapKey]uint32{}
	for _, g := range grants {
		for _, k := range grantKeys(g) {
			m[k] |= uint32(g.Access)
		}
	}
	for _, r := range Canonical(static) {
		m[recordKey(r)] = uint32(r.Access)
	}
	return m
}
