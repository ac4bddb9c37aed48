package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Compilation of the Table model to nftables netlink objects. Pure: no kernel involved.

func (f Family) nft() nftables.TableFamily {
	if f == FamilyBridge {
		return nftables.TableFamilyBridge
	}
	return nftables.TableFamilyINet
}

var hooks = map[string]*nftables.ChainHook{
	"prerouting":  nftables.ChainHookPrerouting,
	"input":       nftables.ChainHookInput,
	"forward":     nftables.ChainHookForward,
	"output":      nftables.ChainHookOutput,
	"postrouting": nftables.ChainHookPostrouting,
}

// compileChain returns the nftables chain for c in table t.
func compileChain(t *nftables.Table, c Chain) (*nftables.Chain, error) {
	hook, ok := hooks[c.Hook]
	if !ok {
		return nil, fmt.Errorf("compile chain %s: %w: unknown hook %q", c.Name, ErrInvalidSpec, c.Hook)
	}
	typ := nftables.ChainTypeFilter
	if c.Type == "nat" {
		typ = nftables.ChainTypeNAT
	}
	policy := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     c.Name,
		Table:    t,
		Type:     typ,
		Hooknum:  hook,
		Priority: nftables.ChainPriorityRef(nftables.ChainPriority(c.Priority)),
		Policy:   &policy,
	}, nil
}

// compileRule turns r into expressions for a table of family fam.
func compileRule(fam Family, r Rule) ([]expr.Any, error) {
	if err := r.check(fam); err != nil {
		return nil, fmt.Errorf("compile rule %q: %w: %w", r, ErrInvalidSpec, err)
	}
	var e []expr.Any
	l3 := r.l3()
	if l3 != L3Any {
		e = append(e, l3Match(fam, l3)...)
	}
	if r.IIf != "" {
		e = append(e, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(r.IIf)})
	}
	if r.OIf != "" {
		e = append(e, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(r.OIf)})
	}
	if r.Saddr.IsValid() {
		e = append(e, addrMatch(r.Saddr, true, false)...)
	}
	if r.Daddr.IsValid() {
		e = append(e, addrMatch(r.Daddr, false, r.NotDaddr)...)
	}
	if r.Proto != "" {
		proto := byte(unix.IPPROTO_TCP)
		if r.Proto == ProtocolUDP {
			proto = unix.IPPROTO_UDP
		}
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}})
		if r.Dport != 0 {
			e = append(e,
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, r.Dport)})
		}
	}
	e = append(e, &expr.Counter{})
	switch r.Action {
	case ActionMasquerade:
		e = append(e, &expr.Masq{})
	case ActionDNAT, ActionSNAT:
		if !r.To.IsValid() || (r.To.Is4() != (l3 == L3IPv4)) {
			return nil, fmt.Errorf("compile rule %q: %w: nat target %v does not match %s", r, ErrInvalidSpec, r.To, l3)
		}
		typ, family := expr.NATTypeDestNAT, uint32(unix.NFPROTO_IPV4)
		if r.Action == ActionSNAT {
			typ = expr.NATTypeSourceNAT
		}
		if l3 == L3IPv6 {
			family = unix.NFPROTO_IPV6
		}
		e = append(e, &expr.Immediate{Register: 1, Data: r.To.AsSlice()},
			&expr.NAT{Type: typ, Family: family, RegAddrMin: 1})
	case ActionDrop:
		e = append(e, &expr.Verdict{Kind: expr.VerdictDrop})
	case ActionAccept:
		e = append(e, &expr.Verdict{Kind: expr.VerdictAccept})
	default:
		return nil, fmt.Errorf("compile rule %q: %w: unknown action %q", r, ErrInvalidSpec, r.Action)
	}
	return e, nil
}

// check refuses a rule whose fields the expressions could not say exactly: every field must
// end up as a match, or the rule would match more than it asks for.
func (r Rule) check(fam Family) error {
	l3 := r.l3()
	switch {
	case l3 != L3Any && l3 != L3IPv4 && l3 != L3IPv6:
		return fmt.Errorf("unknown network protocol %q", l3)
	case r.Proto != "" && r.Proto != ProtocolTCP && r.Proto != ProtocolUDP:
		return fmt.Errorf("unknown protocol %q (want TCP or UDP)", r.Proto)
	case r.Dport != 0 && r.Proto == "":
		return errors.New("a destination port needs a protocol")
	case r.Proto != "" && fam == FamilyBridge && l3 == L3Any:
		return errors.New("a protocol match in a bridge table needs ip or ip6")
	case r.NotDaddr && !r.Daddr.IsValid():
		return errors.New("daddr != needs an address")
	}
	for _, a := range []netip.Addr{r.Saddr.Addr(), r.Daddr.Addr()} {
		if a.IsValid() && (a.Is4() != (l3 == L3IPv4)) {
			return fmt.Errorf("address %s in an %s rule", a, l3)
		}
	}
	for _, n := range []string{r.IIf, r.OIf} {
		if len(n) >= unix.IFNAMSIZ || strings.IndexByte(n, 0) >= 0 {
			return fmt.Errorf("interface name %q is not a Linux interface name", n)
		}
	}
	return nil
}

// l3Match restricts a rule to IPv4 or IPv6: `meta nfproto` in inet tables, the ethertype
// (`meta protocol`) in bridge tables.
func l3Match(fam Family, l3 L3) []expr.Any {
	if fam == FamilyBridge {
		et := uint16(unix.ETH_P_IP)
		if l3 == L3IPv6 {
			et = unix.ETH_P_IPV6
		}
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, et)}}
	}
	p := byte(unix.NFPROTO_IPV4)
	if l3 == L3IPv6 {
		p = unix.NFPROTO_IPV6
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// addrMatch loads the source or destination address and compares it with p (masked for
// prefixes shorter than the address).
func addrMatch(p netip.Prefix, src, not bool) []expr.Any {
	off, n := uint32(16), uint32(4) // IPv4 daddr
	if p.Addr().Is6() {
		off, n = 24, 16
	}
	if src {
		off -= n // IPv4 saddr at 12, IPv6 saddr at 8
	}
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
	if !p.IsSingleIP() {
		mask := make([]byte, n)
		for i := 0; i < p.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)})
	}
	op := expr.CmpOpEq
	if not {
		op = expr.CmpOpNeq
	}
	return append(e, &expr.Cmp{Op: op, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

// ifname pads an interface name to IFNAMSIZ, as nft does for iifname/oifname.
func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}
