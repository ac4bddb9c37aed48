package network

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// FuzzCompileRule: a rule either fails to compile with ErrInvalidSpec or compiles to
// expressions that decode (decodeRule, an independent reading of the netlink expressions) back
// to exactly its fields: no match dropped (a rule broader than asked) and none added.
//
//	go test ./network -run '^$' -fuzz FuzzCompileRule -fuzztime 60s
func FuzzCompileRule(f *testing.F) {
	f.Add(byte(0), byte(1), "eth0", "", []byte{10, 0, 2, 2}, byte(32), []byte{}, byte(0), false, "TCP", uint16(80), byte(1), []byte{10, 0, 2, 2})
	f.Add(byte(1), byte(1), "", "eth0", []byte{}, byte(0), []byte{}, byte(0), false, "UDP", uint16(67), byte(3), []byte{})
	f.Add(byte(0), byte(0), "", "", []byte{}, byte(0), []byte{127, 0, 0, 1}, byte(32), false, "", uint16(8080), byte(1), []byte{10, 0, 2, 2})
	f.Add(byte(0), byte(2), "k6t-eth0", "", make([]byte, 16), byte(64), []byte{}, byte(0), true, "SCTP", uint16(0), byte(0), []byte{})
	f.Add(byte(0), byte(0), "eth0\x00x", "", []byte{}, byte(0), []byte{}, byte(0), true, "", uint16(0), byte(4), []byte{})
	f.Add(byte(1), byte(0), "", "", []byte{}, byte(0), []byte{}, byte(0), false, "TCP", uint16(22), byte(3), []byte{})
	f.Fuzz(func(t *testing.T, fam, l3 byte, iif, oif string, saddr []byte, sbits byte, daddr []byte, dbits byte,
		not bool, proto string, dport uint16, action byte, to []byte) {
		r := Rule{
			L3: []L3{L3Any, L3IPv4, L3IPv6, "ipx"}[l3%4], IIf: iif, OIf: oif,
			Saddr: fuzzPrefix(saddr, sbits), Daddr: fuzzPrefix(daddr, dbits), NotDaddr: not,
			Proto: Protocol(proto), Dport: dport, To: fuzzAddr(to),
			Action: []Action{ActionMasquerade, ActionDNAT, ActionSNAT, ActionDrop, ActionAccept, "reject"}[int(action)%6],
		}
		family := []Family{FamilyInet, FamilyBridge}[fam%2]
		e, err := compileRule(family, r)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("compile %+v: %v is not ErrInvalidSpec", ruleFields(r), err)
			}
			return
		}
		got, err := decodeRule(family, e)
		if err != nil {
			t.Fatalf("compile %+v: %v", ruleFields(r), err)
		}
		want := r
		want.L3 = r.l3()
		want.Saddr, want.Daddr = r.Saddr.Masked(), r.Daddr.Masked()
		if want.Action != ActionDNAT && want.Action != ActionSNAT {
			want.To = netip.Addr{}
		}
		if got != want {
			t.Fatalf("rule %+v (family %s)\ncompiled to a rule matching %+v", ruleFields(want), family, ruleFields(got))
		}
	})
}

// ruleFields prints a Rule field by field (Rule's String is what is being checked).
type ruleFields Rule

func fuzzAddr(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b) // 4 or 16 bytes, else invalid
	return a
}

func fuzzPrefix(b []byte, bits byte) netip.Prefix {
	a := fuzzAddr(b)
	if !a.IsValid() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(a, int(bits)%(a.BitLen()+1))
}

// decodeRule reads compiled expressions back into the Rule they match: each match is a load
// (meta or payload), an optional mask and a compare, then a counter and the action.
func decodeRule(fam Family, e []expr.Any) (Rule, error) {
	var r Rule
	var mask []byte
	load := -1 // what register 1 holds: a meta key, or payload base<<16|offset<<8|len
	const payload = 1 << 24
	for i := 0; i < len(e); i++ {
		switch x := e[i].(type) {
		case *expr.Meta:
			load, mask = int(x.Key), nil
		case *expr.Payload:
			load, mask = payload|int(x.Base)<<16|int(x.Offset)<<8|int(x.Len), nil
		case *expr.Bitwise:
			if !bytes.Equal(x.Xor, make([]byte, len(x.Xor))) || x.Len != uint32(len(x.Mask)) {
				return r, fmt.Errorf("bitwise %+v is not a mask", x)
			}
			mask = x.Mask
		case *expr.Cmp:
			negatedPayload := x.Op == expr.CmpOpNeq && load&payload != 0 // daddr !=
			if x.Op != expr.CmpOpEq && !negatedPayload {
				return r, fmt.Errorf("compare op %v on load %x", x.Op, load)
			}
			if err := decodeMatch(fam, &r, load, mask, x); err != nil {
				return r, err
			}
			load, mask = -1, nil
		case *expr.Counter:
			if i+1 >= len(e) {
				return r, errors.New("counter without an action")
			}
			return r, decodeAction(&r, e[i+1:])
		default:
			return r, fmt.Errorf("unexpected expression %T", x)
		}
	}
	return r, errors.New("no counter and action")
}

func decodeMatch(fam Family, r *Rule, load int, mask []byte, c *expr.Cmp) error {
	const payload = 1 << 24
	switch {
	case load == int(expr.MetaKeyNFPROTO) && fam == FamilyInet && len(c.Data) == 1:
		r.L3 = map[byte]L3{unix.NFPROTO_IPV4: L3IPv4, unix.NFPROTO_IPV6: L3IPv6}[c.Data[0]]
	case load == int(expr.MetaKeyPROTOCOL) && fam == FamilyBridge && len(c.Data) == 2:
		r.L3 = map[uint16]L3{unix.ETH_P_IP: L3IPv4, unix.ETH_P_IPV6: L3IPv6}[binary.BigEndian.Uint16(c.Data)]
	case load == int(expr.MetaKeyIIFNAME) || load == int(expr.MetaKeyOIFNAME):
		if len(c.Data) != unix.IFNAMSIZ || c.Data[unix.IFNAMSIZ-1] != 0 {
			return fmt.Errorf("interface name %q is not NUL-terminated in IFNAMSIZ", c.Data)
		}
		name := string(bytes.TrimRight(c.Data, "\x00"))
		if load == int(expr.MetaKeyIIFNAME) {
			r.IIf = name
		} else {
			r.OIf = name
		}
	case load == int(expr.MetaKeyL4PROTO) && len(c.Data) == 1:
		r.Proto = map[byte]Protocol{unix.IPPROTO_TCP: ProtocolTCP, unix.IPPROTO_UDP: ProtocolUDP}[c.Data[0]]
		if r.Proto == "" {
			return fmt.Errorf("l4proto %d", c.Data[0])
		}
	case load == payload|int(expr.PayloadBaseTransportHeader)<<16|2<<8|2 && len(c.Data) == 2:
		if r.Proto == "" {
			return errors.New("dport compared before the l4 protocol is known")
		}
		r.Dport = binary.BigEndian.Uint16(c.Data)
	case load&payload != 0 && load>>16&0xff == int(expr.PayloadBaseNetworkHeader):
		off, n := load>>8&0xff, load&0xff
		src := map[[2]int]bool{{12, 4}: true, {8, 16}: true}[[2]int{off, n}]
		dst := map[[2]int]bool{{16, 4}: true, {24, 16}: true}[[2]int{off, n}]
		if !src && !dst || len(c.Data) != n {
			return fmt.Errorf("network header load %d/%d compared with %d bytes", off, n, len(c.Data))
		}
		if (n == 4) != (r.L3 == L3IPv4) || (n == 16) != (r.L3 == L3IPv6) {
			return fmt.Errorf("%d-byte address in a %q rule", n, r.L3)
		}
		bits := 8 * n
		if mask != nil {
			bits = 0
			for bits < 8*n && mask[bits/8]&(0x80>>(bits%8)) != 0 {
				bits++
			}
			for i := bits; i < 8*n; i++ {
				if mask[i/8]&(0x80>>(i%8)) != 0 {
					return fmt.Errorf("mask %x is not a prefix", mask)
				}
			}
		}
		a, _ := netip.AddrFromSlice(c.Data)
		p := netip.PrefixFrom(a, bits)
		if p.Masked() != p {
			return fmt.Errorf("compare %s has bits outside its mask", p)
		}
		if src {
			if c.Op != expr.CmpOpEq {
				return errors.New("negated saddr")
			}
			r.Saddr = p
		} else {
			r.Daddr, r.NotDaddr = p, c.Op == expr.CmpOpNeq
		}
	default:
		return fmt.Errorf("compare %x with load %x", c.Data, load)
	}
	return nil
}

func decodeAction(r *Rule, e []expr.Any) error {
	switch x := e[0].(type) {
	case *expr.Masq:
		r.Action = ActionMasquerade
	case *expr.Verdict:
		r.Action = map[expr.VerdictKind]Action{expr.VerdictDrop: ActionDrop, expr.VerdictAccept: ActionAccept}[x.Kind]
	case *expr.Immediate:
		nat, ok := e[len(e)-1].(*expr.NAT)
		if len(e) != 2 || !ok || nat.RegAddrMin != 1 || x.Register != 1 {
			return fmt.Errorf("immediate without a NAT: %v", e)
		}
		r.Action = map[expr.NATType]Action{expr.NATTypeDestNAT: ActionDNAT, expr.NATTypeSourceNAT: ActionSNAT}[nat.Type]
		r.To, _ = netip.AddrFromSlice(x.Data)
		if (nat.Family == unix.NFPROTO_IPV4) != r.To.Is4() {
			return fmt.Errorf("nat family %d for %s", nat.Family, r.To)
		}
		return nil
	}
	if len(e) != 1 || r.Action == "" {
		return fmt.Errorf("action %v", e)
	}
	return nil
}
