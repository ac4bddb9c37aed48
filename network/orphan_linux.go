package network

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
)

// boundNames lists the interface names of the bindings whose links are in the netns at
// netnsPath (from the links' "vmlet-binding NAME" alias). A missing netns has none.
//
// Equivalent to: `ip -n NS -d link show | grep alias`.
func boundNames(netnsPath string) ([]string, error) {
	if _, err := os.Stat(netnsPath); netnsPath != "" && errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	h, done, err := nsHandle(netnsPath)
	if err != nil {
		return nil, err
	}
	defer done()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var names []string
	for _, l := range links {
		if name, ok := strings.CutPrefix(l.Attrs().Alias, ownerAliasPrefix); ok && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// removeOrphan removes the binding of interface name that no Attachment in this process knows
// (an earlier agent made it): a pod interface its bridge took over gets its recorded state
// back, its tap and bridge go, and so do the tables a secondary network's binding has. The
// pod network's binding is only ever removed with a plan (Attachment.Detach, RemovePlan).
//
// Equivalent to: `ip -n NS link del tapX; ip -n NS link del k6t-X; nft delete table bridge
// vmlet-NAME` (+ restoring the pod interface as RemovePlan does).
func removeOrphan(netnsPath, name string) error {
	if _, err := os.Stat(netnsPath); netnsPath != "" && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	h, done, err := nsHandle(netnsPath)
	if err != nil {
		return err
	}
	defer done()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	owner := ownerAliasOf(name)
	var mine []netlink.Link
	for _, l := range links {
		if l.Attrs().Alias == owner {
			mine = append(mine, l)
		}
	}
	for _, br := range mine {
		if br.Type() != "bridge" {
			continue
		}
		for _, l := range links {
			if l.Attrs().MasterIndex != br.Attrs().Index {
				continue
			}
			if pi, ok := parseBridgeAlias(l.Attrs().Name, l.Attrs().Alias); ok {
				if err := restorePodInterface(h, pi); err != nil {
					return err
				}
			}
		}
	}
	for _, l := range mine {
		if err := h.LinkDel(l); err != nil && !isLinkNotFound(err) {
			return fmt.Errorf("delete %s: %w", l.Attrs().Name, err)
		}
	}
	table := tableName(Network{}, name)
	for _, f := range []Family{FamilyBridge, FamilyInet} {
		if err := deleteTable(netnsPath, f, table); err != nil {
			return err
		}
	}
	return nil
}
