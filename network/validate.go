package network

import (
	"errors"
	"fmt"
	"regexp"
)

// nameRE is a DNS label, as the VMI API requires for interface and network names.
var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ifnameRE is a Linux interface name vmlet accepts for pod interfaces: short enough that
// "k6t-" + name fits IFNAMSIZ.
var ifnameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,10}$`)

// secondaryIfnameRE is a pod-side name of an additional interface (Node.AddInterface).
var secondaryIfnameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,14}$`)

// attachmentRE is a secondary network's attachment name: a Multus network name, optionally
// namespace-qualified.
var attachmentRE = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Validate checks a spec without touching the host and returns every problem found, joined;
// each is a *FieldError matching ErrInvalidSpec and its specific sentinel.
func (s *Spec) Validate() error {
	var errs []error
	add := func(e *FieldError) { errs = append(errs, e) }
	if s.UID == "" {
		add(fieldErr("uid", "", ErrInvalidSpec, "required: generated MACs derive from it"))
	}
	if s.VCPUs < 0 {
		add(fieldErr("vcpus", fmt.Sprint(s.VCPUs), ErrInvalidSpec, "must not be negative"))
	}
	if s.LeaseTime < 0 {
		add(fieldErr("leaseTime", s.LeaseTime.String(), ErrInvalidSpec, "must not be negative"))
	}
	if len(s.Interfaces) > MaxInterfaces {
		add(fieldErr("interfaces", fmt.Sprint(len(s.Interfaces)), ErrInvalidSpec, fmt.Sprintf("at most %d", MaxInterfaces)))
	}
	nets := map[string]Network{}
	pods := 0
	for i, n := range s.Networks {
		f := fmt.Sprintf("networks[%d]", i)
		if !nameRE.MatchString(n.Name) {
			add(fieldErr(f+".name", n.Name, ErrInvalidSpec, "must be a DNS label"))
		}
		if _, dup := nets[n.Name]; dup {
			add(fieldErr(f+".name", n.Name, ErrDuplicateInterface, "network defined twice"))
		}
		nets[n.Name] = n
		switch {
		case n.Pod && n.Attachment != "":
			add(fieldErr(f, n.Name, ErrInvalidSpec, "a network is either the pod network or a secondary one"))
			continue
		case !n.Pod && n.Attachment == "":
			add(fieldErr(f, n.Name, ErrUnknownNetwork, "neither the pod network nor a secondary network attachment"))
			continue
		case !n.Pod:
			if !attachmentRE.MatchString(n.Attachment) {
				add(fieldErr(f+".attachment", n.Attachment, ErrUnknownNetwork, "want a network attachment name such as ns/name"))
			}
			errs = append(errs, validateNetwork(f, n)...)
			continue
		}
		pods++
		if pods > 1 {
			add(fieldErr(f, n.Name, ErrDuplicateInterface, "only one pod network"))
		}
		errs = append(errs, validateNetwork(f, n)...)
	}
	used := map[string]bool{}
	names := map[string]bool{}
	for i, ifc := range s.Interfaces {
		f := fmt.Sprintf("interfaces[%d]", i)
		if !nameRE.MatchString(ifc.Name) {
			add(fieldErr(f+".name", ifc.Name, ErrInvalidSpec, "must be a DNS label"))
		}
		if names[ifc.Name] {
			add(fieldErr(f+".name", ifc.Name, ErrDuplicateInterface, "interface defined twice"))
		}
		names[ifc.Name] = true
		n, ok := nets[ifc.Name]
		switch {
		case !ok:
			add(fieldErr(f+".name", ifc.Name, ErrUnknownNetwork, "no network of this name"))
		case used[ifc.Name]:
			add(fieldErr(f+".name", ifc.Name, ErrDuplicateInterface, "network used by two interfaces"))
		case !n.Pod && ifc.Binding != BindingBridge:
			add(fieldErr(f+".binding", string(ifc.Binding), ErrUnsupportedBinding, "secondary networks take the bridge binding only (masquerade needs the pod network)"))
		}
		used[ifc.Name] = true
		errs = append(errs, validateInterface(f, ifc)...)
	}
	return errors.Join(errs...)
}

func validateNetwork(f string, n Network) []error {
	var errs []error
	if n.PodInterface != "" && !ifnameRE.MatchString(n.PodInterface) {
		errs = append(errs, fieldErr(f+".podInterface", n.PodInterface, ErrInvalidSpec, "want a short lowercase interface name"))
	}
	if p := n.GuestCIDR; p.IsValid() {
		if !p.Addr().Is4() || p.Bits() > 30 || p != p.Masked() {
			errs = append(errs, fieldErr(f+".guestCIDR", p.String(), ErrInvalidSpec, "want an IPv4 network of at most /30"))
		}
	}
	if p := n.GuestCIDR6; p.IsValid() {
		if !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() > 126 || p != p.Masked() {
			errs = append(errs, fieldErr(f+".guestCIDR6", p.String(), ErrInvalidSpec, "want an IPv6 network of at most /126"))
		}
	}
	return errs
}

func validateInterface(f string, ifc Interface) []error {
	var errs []error
	switch ifc.Binding {
	case BindingMasquerade:
	case BindingBridge:
		if len(ifc.Ports) > 0 {
			errs = append(errs, fieldErr(f+".ports", fmt.Sprint(len(ifc.Ports)), ErrUnsupportedBinding, "ports need the masquerade binding"))
		}
	default:
		errs = append(errs, fieldErr(f+".binding", string(ifc.Binding), ErrUnsupportedBinding, "want masquerade or bridge"))
	}
	if ifc.MAC != "" {
		if _, err := ParseMAC(ifc.MAC); err != nil {
			errs = append(errs, fieldErr(f+".macAddress", ifc.MAC, ErrInvalidMAC, "want a unicast MAC such as 52:54:00:12:34:56"))
		}
	}
	seen := map[string]bool{}
	for j, p := range ifc.Ports {
		pf := fmt.Sprintf("%s.ports[%d]", f, j)
		proto := p.Protocol
		if proto == "" {
			proto = ProtocolTCP
		}
		if proto != ProtocolTCP && proto != ProtocolUDP {
			errs = append(errs, fieldErr(pf+".protocol", string(p.Protocol), ErrInvalidProtocol, "want TCP or UDP"))
		}
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, fieldErr(pf+".port", fmt.Sprint(p.Port), ErrInvalidPort, "want 1..65535"))
		}
		key := fmt.Sprintf("%s/%d", proto, p.Port)
		if seen[key] {
			errs = append(errs, fieldErr(pf+".port", key, ErrInvalidPort, "listed twice"))
		}
		seen[key] = true
	}
	return errs
}
