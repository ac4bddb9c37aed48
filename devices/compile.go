package devices

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// GrantsMap is the symbol the compiled program uses for the grants map; the loader associates
// the real map with it (asm.Instructions.AssociateMap).
const GrantsMap = "vmlet_grants"

// CompileOptions control Compile.
type CompileOptions struct {
	// Grants appends lookups in the grants map (symbol GrantsMap) after the static rules, so
	// rules can be granted and revoked at run time by map updates, without a new program.
	Grants bool
}

// Register use. R6-R9 are callee-saved, so they survive the map lookup helper calls.
const (
	rType   = asm.R6 // BPF_DEVCG_DEV_BLOCK or BPF_DEVCG_DEV_CHAR
	rNeed   = asm.R7 // access bits not yet granted
	rMajor  = asm.R8
	rMinor  = asm.R9
	keyBase = -16 // mapKey on the stack at fp-16: type, major, minor
)

const (
	labelReject = "reject"
	labelAccept = "accept"
	labelNext   = "next" // placeholder, rewritten to the following block's label
)

// Compile turns rules into a BPF_PROG_TYPE_CGROUP_DEVICE program deciding like Evaluate: the
// rules are made Canonical, deny blocks run first (any overlap rejects), then allow blocks
// clear the granted bits from the request and accept once none is left, then (opts.Grants) up
// to four grants-map lookups do the same, then the program rejects. It touches no kernel.
//
// The context is struct bpf_cgroup_dev_ctx {u32 access_type (access<<16 | type); u32 major;
// u32 minor}; the return value is 1 (allow) or 0 (EPERM).
func Compile(rules []Rule, opts CompileOptions) (asm.Instructions, error) {
	if err := validateAll(rules); err != nil {
		return nil, fmt.Errorf("compile device rules: %w", err)
	}
	var blocks []asm.Instructions
	for _, r := range Canonical(rules) {
		blocks = append(blocks, ruleBlock(r))
	}
	if opts.Grants {
		blocks = append(blocks, grantBlocks()...)
	}

	insns := prologue()
	for i, b := range blocks {
		label := blockLabel(i)
		next := labelReject
		if i+1 < len(blocks) {
			next = blockLabel(i + 1)
		}
		for j := range b {
			if b[j].Reference() == labelNext {
				b[j] = b[j].WithReference(next)
			}
		}
		b[0] = b[0].WithSymbol(label)
		insns = append(insns, b...)
	}
	return append(insns,
		asm.Mov.Imm32(asm.R0, 0).WithSymbol(labelReject),
		asm.Return(),
		asm.Mov.Imm32(asm.R0, 1).WithSymbol(labelAccept),
		asm.Return(),
	), nil
}

func blockLabel(i int) string { return fmt.Sprintf("block-%d", i) }

// prologue loads the context into registers and rejects a request without access bits.
func prologue() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(rType, asm.R1, 0, asm.Word),
		asm.Mov.Reg32(rNeed, rType),
		asm.RSh.Imm32(rNeed, 16),
		asm.And.Imm32(rType, 0xffff),
		asm.LoadMem(rMajor, asm.R1, 4, asm.Word),
		asm.LoadMem(rMinor, asm.R1, 8, asm.Word),
		asm.JEq.Imm(rNeed, 0, labelReject),
	}
}

// ruleBlock matches r's device (falling through to "next" when it does not match), then
// rejects (deny) or clears bits and maybe accepts (allow).
func ruleBlock(r Rule) asm.Instructions {
	var b asm.Instructions
	if r.Type != AllDevices {
		b = append(b, asm.JNE.Imm(rType, int32(typeCode(r.Type)), labelNext))
	}
	if r.Major != Wildcard {
		b = append(b, asm.JNE.Imm(rMajor, int32(r.Major), labelNext))
	}
	if r.Minor != Wildcard {
		b = append(b, asm.JNE.Imm(rMinor, int32(r.Minor), labelNext))
	}
	if !r.Allow {
		return append(b, asm.JSet.Imm(rNeed, int32(r.Access), labelReject))
	}
	return append(b,
		asm.And.Imm32(rNeed, int32(^uint32(r.Access))),
		asm.JEq.Imm(rNeed, 0, labelAccept),
	)
}

// grantBlocks look up {type,major,minor}, {type,major,*}, {type,*,minor} and {type,*,*}.
// Each block only rewrites the key fields that change from the previous lookup.
func grantBlocks() []asm.Instructions {
	wild := int64(int32(-1)) // keyWildcard as a 32-bit store
	return []asm.Instructions{
		append(asm.Instructions{
			asm.StoreMem(asm.RFP, keyBase, rType, asm.Word),
			asm.StoreMem(asm.RFP, keyBase+4, rMajor, asm.Word),
			asm.StoreMem(asm.RFP, keyBase+8, rMinor, asm.Word),
		}, lookup()...),
		append(asm.Instructions{
			asm.StoreImm(asm.RFP, keyBase+8, wild, asm.Word),
		}, lookup()...),
		append(asm.Instructions{
			asm.StoreImm(asm.RFP, keyBase+4, wild, asm.Word),
			asm.StoreMem(asm.RFP, keyBase+8, rMinor, asm.Word),
		}, lookup()...),
		append(asm.Instructions{
			asm.StoreImm(asm.RFP, keyBase+8, wild, asm.Word),
		}, lookup()...),
	}
}

// lookup calls bpf_map_lookup_elem(&grants, fp-16); a hit clears its bits from rNeed.
func lookup() asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, 0).WithReference(GrantsMap),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyBase),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, labelNext),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.Xor.Imm32(asm.R1, -1),
		asm.And.Reg32(rNeed, asm.R1),
		asm.JEq.Imm(rNeed, 0, labelAccept),
	}
}
