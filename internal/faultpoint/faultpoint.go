package faultpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Environment variables the process reads at start.
const (
	EnvPoints = "VMLET_FAULTPOINTS"
	EnvDir    = "VMLET_FAULTPOINT_DIR"
)

// Points is a set of armed points. The zero value and nil are disarmed.
type Points struct {
	armed map[string]bool
	dir   string

	mu  sync.Mutex
	hit map[string]bool
}

// New arms the points of spec (the VMLET_FAULTPOINTS syntax) with signs written into dir
// ("" writes none).
func New(spec, dir string) *Points {
	p := &Points{armed: map[string]bool{}, dir: dir, hit: map[string]bool{}}
	for _, s := range strings.Split(spec, ",") {
		if s = strings.TrimSpace(s); s != "" {
			p.armed[s] = true
		}
	}
	return p
}

// Armed reports whether a Hit of name with detail would stop.
func (p *Points) Armed(name, detail string) bool {
	if p == nil || len(p.armed) == 0 {
		return false
	}
	return p.armed[name] || detail != "" && p.armed[name+":"+detail]
}

// Stop is Hit without the block: it marks the point hit, writes its sign and reports whether
// the caller is to stop (false when the point is not armed or was hit before).
func (p *Points) Stop(name, detail string) bool {
	if !p.Armed(name, detail) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hit[name] {
		return false
	}
	p.hit[name] = true
	fmt.Fprintf(os.Stderr, "faultpoint %s (%s): stopped here until the process is killed\n", name, detail)
	if p.dir != "" {
		// The sign: a file named after the point, holding the detail.
		if err := os.WriteFile(filepath.Join(p.dir, SignName(name)), []byte(detail), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "faultpoint %s: write its sign: %v\n", name, err)
		}
	}
	return true
}

// SignName is the file a stop at point name writes into the sign folder.
func SignName(name string) string { return strings.NewReplacer("/", "_", ":", "_").Replace(name) }

var process = New(os.Getenv(EnvPoints), os.Getenv(EnvDir))

// Hit stops the calling goroutine for good if this process armed the point (see the package
// doc); otherwise it returns at once.
func Hit(name, detail string) {
	if process.Stop(name, detail) {
		select {}
	}
}
