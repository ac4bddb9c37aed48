package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/vmlet/vmlet/internal/vmtop"
)

// printTopTable prints the rows as aligned columns, kubectl-style.
func printTopTable(w io.Writer, rows []vmtop.Row) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tNODE\tCPU(%)\tMEMORY\tDISK-READ\tDISK-WRITE\tNET-RX\tNET-TX")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, orUnknown(r.Node),
			vmtop.FormatPercent(r.CPUCores), vmtop.FormatBytes(r.MemoryResidentBytes),
			vmtop.FormatRate(r.DiskReadBytesPerSecond), vmtop.FormatRate(r.DiskWriteBytesPerSecond),
			vmtop.FormatRate(r.NetRxBytesPerSecond), vmtop.FormatRate(r.NetTxBytesPerSecond))
	}
	return tw.Flush()
}

func orUnknown(s string) string {
	if s == "" {
		return vmtop.Unknown
	}
	return s
}

// topJSON is -o json: every row's figures as numbers, and the warnings.
type topJSON struct {
	Items    []vmtop.Row `json:"items"`
	Warnings []string    `json:"warnings"`
}

func printTopJSON(w io.Writer, rows []vmtop.Row, warnings []string) error {
	out := topJSON{Items: rows, Warnings: warnings}
	if out.Items == nil {
		out.Items = []vmtop.Row{}
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
}
