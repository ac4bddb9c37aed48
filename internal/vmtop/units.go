package vmtop

import "fmt"

// Unknown is how a nil figure prints.
const Unknown = "-"

// FormatPercent prints CPUs as a percentage of one CPU, one decimal: 0.125 → "12.5%"
// (a guest keeping two CPUs busy is at 200%, like top(1)'s per-process figure).
func FormatPercent(cores *float64) string {
	if cores == nil {
		return Unknown
	}
	return fmt.Sprintf("%.1f%%", *cores*100)
}

// FormatBytes prints a byte count in IEC units: "512B", "1.5KiB", "235.0MiB".
func FormatBytes(b *float64) string {
	if b == nil {
		return Unknown
	}
	v := *b
	if v < 1023.5 { // would print as 1024B
		return fmt.Sprintf("%.0fB", v)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v /= 1024
	i := 0
	for v >= 1023.95 && i < len(units)-1 { // would print as 1024.0
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f%s", v, units[i])
}

// FormatRate prints bytes per second: FormatBytes + "/s".
func FormatRate(bps *float64) string {
	if bps == nil {
		return Unknown
	}
	return FormatBytes(bps) + "/s"
}
