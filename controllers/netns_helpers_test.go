package controllers_test

import (
	"fmt"
	"runtime"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// inNetns runs f on a fresh OS thread that entered the netns at path, and returns f's error.
// The thread is never unlocked: Go discards it rather than reuse a thread in another netns.
func inNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromPath(path)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		if err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// netnsContents lists the links and nftables tables of the netns at path.
// Equivalent to: ip -n NS link; nft list tables (inside NS).
func netnsContents(path string) ([]netlink.Link, []*nftables.Table, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, nil, err
	}
	defer nh.Close()
	links, err := nh.LinkList()
	if err != nil {
		return nil, nil, err
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		return nil, nil, err
	}
	tables, err := c.ListTables()
	if err != nil {
		return nil, nil, err
	}
	return links, tables, nil
}
