package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/vmlet/vmlet/internal/subresclient"
	"github.com/vmlet/vmlet/internal/vmtop"
)

// guestInfo prints one guest agent subresource (guestosinfo, userlist, filesystemlist) as
// JSON or as a table.
func (c *cli) guestInfo(ctx context.Context, t *vmTarget, sub, output string) error {
	if output != "json" && output != "table" {
		return usageError(fmt.Sprintf("-o %q: want json or table", output))
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	b, err := t.sub.Raw(ctx, t.vmi, sub)
	if err != nil {
		return explain(err)
	}
	if output == "json" {
		fmt.Fprintf(c.stdout, "%s\n", pretty(b))
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch sub {
	case "guestosinfo":
		var g subresclient.GuestAgentInfo
		if err := json.Unmarshal(b, &g); err != nil {
			return fmt.Errorf("decode guestosinfo: %w", err)
		}
		printGuestInfo(tw, &g)
	case "userlist":
		var l subresclient.GuestOSUserList
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("decode userlist: %w", err)
		}
		printUsers(tw, l.Items)
	case "filesystemlist":
		var l subresclient.FileSystemList
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("decode filesystemlist: %w", err)
		}
		printFilesystems(tw, l.Items)
	}
	return nil
}

func printGuestInfo(w io.Writer, g *subresclient.GuestAgentInfo) {
	os := g.OS
	for _, kv := range [][2]string{
		{"HOSTNAME", g.Hostname}, {"OS", os.PrettyName}, {"NAME", os.Name}, {"ID", os.ID},
		{"VERSION", os.Version}, {"VERSION-ID", os.VersionID}, {"KERNEL", os.KernelRelease},
		{"KERNEL-VERSION", os.KernelVersion}, {"MACHINE", os.Machine}, {"TIMEZONE", g.Timezone},
		{"AGENT", g.GuestAgentVersion},
	} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	fmt.Fprintf(w, "USERS:\t%d\nFILESYSTEMS:\t%d\n", len(g.UserList), len(g.FSInfo.Filesystems))
}

func printUsers(w io.Writer, users []subresclient.GuestOSUser) {
	fmt.Fprintln(w, "USER\tDOMAIN\tLOGIN (UTC)")
	for _, u := range users {
		login := "-"
		if u.LoginTime > 0 {
			login = u.Login().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", u.UserName, dash(u.Domain), login)
	}
}

func printFilesystems(w io.Writer, fss []subresclient.FileSystem) {
	fmt.Fprintln(w, "DISK\tMOUNTPOINT\tTYPE\tUSED\tTOTAL\tUSE%")
	for _, f := range fss {
		use := "-"
		if f.TotalBytes > 0 {
			use = fmt.Sprintf("%.0f%%", 100*float64(f.UsedBytes)/float64(f.TotalBytes))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", dash(f.DiskName), f.MountPoint, dash(f.FileSystemType),
			bytesIEC(f.UsedBytes), bytesIEC(f.TotalBytes), use)
	}
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// bytesIEC formats bytes as vmctl top does ("235.0MiB").
func bytesIEC(b int64) string {
	v := float64(b)
	return vmtop.FormatBytes(&v)
}
