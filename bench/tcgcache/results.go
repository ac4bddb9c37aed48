package main

// Results is what `tcgcache run` writes.
type Results struct {
	Started   string   `json:"started"` // RFC 3339, UTC
	Host      string   `json:"host"`    // kernel, cores, memory, QEMU version
	Guest     string   `json:"guest"`   // image folder and its kernel
	MemoryMiB int      `json:"memory_mib"`
	VCPUs     int      `json:"vcpus"`
	Rounds    int      `json:"rounds"`
	Configs   []Config `json:"configs"` // in the order of the first round
	Boots     []Boot   `json:"boots"`   // in the order they ran
}

// Config is one measured setup: a mode and a tb-size (0 = QEMU's default, no tb-size).
type Config struct {
	Mode      string `json:"mode"` // "qemu" or "vmlet"
	TBSizeMiB int    `json:"tb_size_mib"`
}

// Label is how tables name c.
func (c Config) Label() string {
	s := "default"
	if c.TBSizeMiB > 0 {
		s = itoa(c.TBSizeMiB)
	}
	return c.Mode + " tb-size=" + s
}

// Boot is one boot of one config.
type Boot struct {
	Config
	Round       int     `json:"round"`        // 1-based
	Seconds     float64 `json:"seconds"`      // exec → "login:" on the serial console
	CPUSeconds  float64 `json:"cpu_seconds"`  // QEMU's user + system CPU time until then
	RSSMiB      float64 `json:"rss_mib"`      // VmRSS at the prompt
	PeakRSSMiB  float64 `json:"peak_rss_mib"` // VmHWM at the prompt
	Load1Before float64 `json:"load1_before"`
	Load1After  float64 `json:"load1_after"`
	// Err is why the boot failed (a timeout under load, say); the other fields are then partial
	// and the boot counts in no median.
	Err string `json:"err,omitempty"`
}
