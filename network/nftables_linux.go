package network

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nftConn opens an nftables connection to the namespace at path (empty: the process's own).
func nftConn(path string) (*nftables.Conn, func(), error) {
	if path == "" {
		c, err := nftables.New()
		if err != nil {
			return nil, nil, fmt.Errorf("open nftables: %w", err)
		}
		return c, func() {}, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("open nftables in %s: %w", path, err)
	}
	return c, func() { ns.Close() }, nil
}

// replaceTable creates t in the namespace at path, or replaces it whole, in one nftables
// transaction: packets never see a half-built table, and applying the same table twice
// leaves the same state.
//
// Equivalent to: `nft -f -` with `table F N {}; delete table F N; table F N { ... }`.
func replaceTable(path string, t *Table) error {
	c, done, err := nftConn(path)
	if err != nil {
		return err
	}
	defer done()
	tbl := &nftables.Table{Family: t.Family.nft(), Name: t.Name}
	c.AddTable(tbl) // exists afterwards, so the delete below cannot fail
	c.DelTable(tbl)
	c.AddTable(tbl)
	for _, ch := range t.Chains {
		chain, err := compileChain(tbl, ch)
		if err != nil {
			return fmt.Errorf("replace table %s %s: %w", t.Family, t.Name, err)
		}
		c.AddChain(chain)
		for _, r := range ch.Rules {
			exprs, err := compileRule(t.Family, r)
			if err != nil {
				return fmt.Errorf("replace table %s %s: %w", t.Family, t.Name, err)
			}
			c.AddRule(&nftables.Rule{Table: tbl, Chain: chain, Exprs: exprs})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("replace table %s %s: %w", t.Family, t.Name, err)
	}
	return nil
}

// deleteTable removes a table; a missing one is not an error.
//
// Equivalent to: `nft delete table F N`.
func deleteTable(path string, family Family, name string) error {
	c, done, err := nftConn(path)
	if err != nil {
		return err
	}
	defer done()
	ts, err := c.ListTablesOfFamily(family.nft())
	if err != nil {
		return fmt.Errorf("delete table %s %s: %w", family, name, err)
	}
	if !slices.ContainsFunc(ts, func(t *nftables.Table) bool { return t.Name == name }) {
		return nil
	}
	c.DelTable(&nftables.Table{Family: family.nft(), Name: name})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete table %s %s: %w", family, name, err)
	}
	return nil
}

// listTables returns the names ("family name") of every nftables table in the namespace.
//
// Equivalent to: `nft list tables`.
func listTables(path string) ([]string, error) {
	c, done, err := nftConn(path)
	if err != nil {
		return nil, err
	}
	defer done()
	ts, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%s %s", familyName(t.Family), t.Name))
	}
	return out, nil
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprintf("family%d", f)
}
