package controllers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

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

// dhcpSocketHolders finds the DHCP server sockets (UDP port 67, and 547 with IPv6) of the
// netns at path and the processes holding them: pid → socket count. Equivalent to
// `ss -ulnp 'sport = :67'` inside the netns, which names every holder.
func dhcpSocketHolders(path string) (map[int]int, error) {
	inodes := map[string]bool{}
	err := inNetns(path, func() error {
		for _, f := range []string{"/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"} {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n")[1:] {
				fs := strings.Fields(line)
				if len(fs) < 10 {
					continue
				}
				if port := fs[1][strings.LastIndex(fs[1], ":")+1:]; port == "0043" || port == "0223" {
					inodes["socket:["+fs[9]+"]"] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	holders := map[int]int{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && inodes[target] {
				holders[pid]++
			}
		}
	}
	return holders, nil
}
