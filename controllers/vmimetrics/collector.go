package vmimetrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// ErrNoLauncher says the agent holds no live connection to the VMI's launcher (none started
// yet, or it exited): the VMI has no domain stats, which is no scrape error.
var ErrNoLauncher = errors.New("no live launcher")

// Launchers reaches a node's live launchers by VMI UID (the node agent's VMIReconciler).
type Launchers interface {
	DomainStats(ctx context.Context, uid types.UID) (*pb.DomainStatsResponse, error)
	MigrationProgress(ctx context.Context, uid types.UID) (*pb.MigrationStatus, error)
}

// Source is one node agent's VMIs.
type Source struct {
	Node string
	// VMIs reads the VMIs (the agent manager's cache); the node's are those whose
	// status.nodeName is Node.
	VMIs client.Reader
	// Launchers reaches the node's launchers.
	Launchers Launchers
	// Overhead is a VMI's launcher memory overhead in bytes (false: unknown, no series).
	Overhead func(*vmletv1.VirtualMachineInstance) (int64, bool)
	// Migrations finds a migration's name by its UID for kubevirt_vmi_migration_succeeded /
	// _failed; nil: those series have an empty vmim.
	Migrations client.Reader
}

// Defaults of a Collector.
const (
	DefaultConcurrency = 8
	DefaultTimeout     = 1500 * time.Millisecond // per launcher call
	// scrapeTimeout bounds a whole scrape (KubeVirt's collection timeout is 10 s).
	scrapeTimeout = 10 * time.Second
)

// Collector is the prometheus.Collector of the VMIs of one or more node agents (local mode
// runs several in one process: one Collector serves them all, each VMI labelled with its
// node). It is unchecked (Describe sends nothing): KubeVirt's series carry the VMI's own
// labels, which vary from VMI to VMI; Families lists what it exports.
type Collector struct {
	// Concurrency bounds the launcher calls in flight per scrape; Timeout is each call's
	// deadline. Zero: the defaults.
	Concurrency int
	Timeout     time.Duration

	mu      sync.Mutex
	sources map[int]Source
	next    int
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of sources.
func New(sources ...Source) *Collector {
	c := &Collector{sources: map[int]Source{}}
	for _, s := range sources {
		c.Add(s)
	}
	return c
}

// Add adds a source; remove takes it out again (its VMIs' series go with it).
func (c *Collector) Add(s Source) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.next
	c.next++
	c.sources[id] = s
	return func() {
		c.mu.Lock()
		delete(c.sources, id)
		c.mu.Unlock()
	}
}

// Describe sends nothing: an unchecked collector.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect lists each source's VMIs and emits their series, reading the live launchers'
// stats concurrently.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := make([]Source, 0, len(c.sources))
	for _, s := range c.sources {
		sources = append(sources, s)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	n := c.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	// A VMI's launcher overhead and migration outcome have no node label: while a migration
	// hands the VMI over, the source's cache and the target's may both have it on their node,
	// and the same series twice fails the whole scrape (HTTP 500). Those go once per VMI.
	once := map[types.UID]bool{}
	for _, s := range sources {
		var l vmletv1.VirtualMachineInstanceList
		if err := s.VMIs.List(ctx, &l); err != nil {
			scrapeErrors.WithLabelValues(s.Node, "list").Inc()
			continue
		}
		names := c.migrationNames(ctx, s, l.Items)
		for i := range l.Items {
			vmi := &l.Items[i]
			if vmi.Status.NodeName != s.Node {
				continue
			}
			ch <- VMIInfo(vmi)
			if !once[vmi.UID] {
				once[vmi.UID] = true
				if s.Overhead != nil {
					if b, ok := s.Overhead(vmi); ok {
						ch <- Overhead(vmi, b)
					}
				}
				for _, m := range MigrationOutcome(vmi, names[migrationUID(vmi)]) {
					ch <- m
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				for _, m := range c.launcherSeries(ctx, s, vmi) {
					ch <- m
				}
			}()
		}
	}
	wg.Wait()
}

// launcherSeries reads the VMI's launcher: its domain stats and, while its outgoing migration
// runs here, the migration's progress.
func (c *Collector) launcherSeries(ctx context.Context, s Source, vmi *vmletv1.VirtualMachineInstance) []prometheus.Metric {
	d := c.Timeout
	if d <= 0 {
		d = DefaultTimeout
	}
	id := Identity(vmi)
	cctx, cancel := context.WithTimeout(ctx, d)
	st, err := s.Launchers.DomainStats(cctx, vmi.UID)
	cancel()
	var out []prometheus.Metric
	switch {
	case errors.Is(err, ErrNoLauncher):
		return nil
	case err != nil:
		scrapeErrors.WithLabelValues(s.Node, "domain_stats").Inc()
	default:
		out = DomainStats(id, st)
	}
	if migrating(vmi, s.Node) {
		cctx, cancel := context.WithTimeout(ctx, d)
		ms, err := s.Launchers.MigrationProgress(cctx, vmi.UID)
		cancel()
		switch {
		case errors.Is(err, ErrNoLauncher):
		case err != nil:
			scrapeErrors.WithLabelValues(s.Node, "migration_status").Inc()
		default:
			out = append(out, Migration(id, ms)...)
		}
	}
	return out
}

func migrationUID(vmi *vmletv1.VirtualMachineInstance) types.UID {
	if ms := vmi.Status.MigrationState; ms != nil {
		return ms.MigrationUID
	}
	return ""
}

// migrationNames maps the UIDs of the node's VMIs' ended migrations to the migrations' names.
func (c *Collector) migrationNames(ctx context.Context, s Source, vmis []vmletv1.VirtualMachineInstance) map[types.UID]string {
	if s.Migrations == nil {
		return nil
	}
	want := false
	for i := range vmis {
		if ms := vmis[i].Status.MigrationState; vmis[i].Status.NodeName == s.Node && ms != nil && (ms.Completed || ms.Failed) {
			want = true
			break
		}
	}
	if !want {
		return nil
	}
	var l vmletv1.VirtualMachineInstanceMigrationList
	if err := s.Migrations.List(ctx, &l); err != nil {
		scrapeErrors.WithLabelValues(s.Node, "list_migrations").Inc()
		return nil
	}
	names := make(map[types.UID]string, len(l.Items))
	for _, m := range l.Items {
		names[m.UID] = m.Name
	}
	return names
}

// process is the collector of this process's node agents, on controller-runtime's registry.
var process struct {
	once sync.Once
	c    *Collector
	err  error
}

// AddToProcess adds a node agent's source to the process's collector, registered on
// controller-runtime's metrics registry (sigs.k8s.io/controller-runtime/pkg/metrics.Registry)
// on first use: one collector for all node agents of the process (local mode's nodes).
func AddToProcess(s Source) (remove func(), err error) {
	process.once.Do(func() {
		process.c = New()
		process.err = ctrlmetrics.Registry.Register(process.c)
	})
	if process.err != nil {
		return nil, process.err
	}
	return process.c.Add(s), nil
}
