package main

// Results is what `sidebyside run` writes (bench/results.json) and `sidebyside render` reads.
type Results struct {
	Date        string       `json:"date"`
	Machine     Machine      `json:"machine"`
	Commands    []string     `json:"commands"`
	Rounds      int          `json:"rounds"`
	Guest       GuestInfo    `json:"guest"`
	Comparisons []Comparison `json:"comparisons"`
	// LibvirtExtras lists the QEMU options libvirt's command line has and vmlet's does not.
	LibvirtExtras []string `json:"libvirt_extras"`
	// LibvirtArgv and VmletArgv are the two command lines as QEMU got them (one per line).
	LibvirtArgv []string `json:"libvirt_argv"`
	VmletArgv   []string `json:"vmlet_argv"`
	// GoBenchmarks are the metrics of the project's Go benchmarks of the same `make bench` run.
	GoBenchmarks []GoBenchmark `json:"go_benchmarks,omitempty"`
	Notes        []string      `json:"notes"`
	DurationSec  float64       `json:"duration_s"`
}

// Machine describes the host the numbers come from.
type Machine struct {
	Cores          int    `json:"cores"`
	CPUModel       string `json:"cpu_model"`
	MemGiB         int    `json:"mem_gib"`
	Kernel         string `json:"kernel"`
	QEMU           string `json:"qemu"`
	Libvirt        string `json:"libvirt"`
	Go             string `json:"go"`
	Accel          string `json:"accel"`
	LoadAvgAtStart string `json:"loadavg_at_start"`
}

// GuestInfo is the guest every mode ran.
type GuestInfo struct {
	Kernel      string `json:"kernel"`
	Initrd      string `json:"initrd"`
	Cmdline     string `json:"cmdline"`
	VCPUs       int    `json:"vcpus"`
	MemoryMiB   int    `json:"memory_mib"`
	TCGCacheMiB int    `json:"tcg_cache_mib"`
	Machine     string `json:"machine"`
}

// Comparison is one measurement taken in every mode, interleaved.
type Comparison struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Unit        string `json:"unit"`
	Method      string `json:"method"`
	Reference   string `json:"reference"` // the mode ratios are taken against
	Modes       []Mode `json:"modes"`
	SampleUnit  string `json:"sample_unit"` // what one sample is ("round", "cycle")
	HigherIsBad bool   `json:"higher_is_worse"`
}

// Mode is one mode's samples in a comparison.
type Mode struct {
	Name    string    `json:"name"`
	Samples []float64 `json:"samples"`
	Summary Summary   `json:"summary"`
	// VsRef compares this mode with the reference (this / reference); nil for the reference.
	VsRef *Ratio `json:"vs_reference,omitempty"`
}

// GoBenchmark is one line of `go test -bench` output.
type GoBenchmark struct {
	Package string             `json:"package"`
	Name    string             `json:"name"`
	N       int64              `json:"n"`
	Metrics map[string]float64 `json:"metrics"`
}

// newComparison builds a comparison from samples per mode (in the order given by modes); the
// first mode is the reference.
func newComparison(id, title, unit, sampleUnit, method string, modes []string, samples map[string][]float64) Comparison {
	c := Comparison{ID: id, Title: title, Unit: unit, SampleUnit: sampleUnit, Method: method, Reference: modes[0], HigherIsBad: true}
	ref := samples[modes[0]]
	for i, m := range modes {
		md := Mode{Name: m, Samples: samples[m], Summary: Summarize(samples[m])}
		if i > 0 {
			r := Compare(samples[m], ref)
			md.VsRef = &r
		}
		c.Modes = append(c.Modes, md)
	}
	return c
}
