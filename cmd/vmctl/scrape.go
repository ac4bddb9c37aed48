package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/vmlet/vmlet/internal/vmtop"
)

// target is one agent's metrics endpoint.
type target struct {
	node string // "" for --metrics or several nodes: the series' node label names it
	url  string
	// nodes are the nodes sharing url (one process serving several nodes), for messages.
	nodes []string
}

func (t target) String() string {
	if len(t.nodes) > 0 {
		return fmt.Sprintf("nodes %s (%s)", strings.Join(t.nodes, ", "), t.url)
	}
	if t.node == "" {
		return t.url
	}
	return fmt.Sprintf("node %s (%s)", t.node, t.url)
}

// maxScrape bounds one exposition (an agent serves a few KiB per VMI).
const maxScrape = 64 << 20

// scrape fetches and parses one exposition, bounded by the call timeout.
func (c *cli) scrape(ctx context.Context, t target) (vmtop.Families, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	req.Header.Set("Accept", vmtop.AcceptHeader)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: HTTP %s", resp.Status)
	}
	return vmtop.Parse(io.LimitReader(resp.Body, maxScrape), resp.Header)
}

// scrapes is one round: every target at once, each with the time its answer was read.
type scraped struct {
	fams vmtop.Families
	at   time.Time
	err  error
}

func (c *cli) round(ctx context.Context, ts []target) []scraped {
	out := make([]scraped, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Go(func() {
			fams, err := c.scrape(ctx, t)
			out[i] = scraped{fams: fams, at: c.now(), err: err}
		})
	}
	wg.Wait()
	return out
}

// sampled is what two rounds gave: the rows of the agents that answered both, and a warning
// for each that did not.
type sampled struct {
	rows   []vmtop.Row
	failed []string
}

// sample scrapes every target, sleeps interval, scrapes the ones that answered again and
// computes each agent's rows over the time between its two answers.
func (c *cli) sample(ctx context.Context, ts []target, interval time.Duration) sampled {
	var res sampled
	first := c.round(ctx, ts)
	var again []target
	var before []scraped
	for i, s := range first {
		if s.err != nil {
			res.failed = append(res.failed, fmt.Sprintf("%s did not answer: %v", ts[i], s.err))
			continue
		}
		again = append(again, ts[i])
		before = append(before, s)
	}
	if len(again) > 0 {
		if err := c.sleep(ctx, interval); err != nil {
			for _, t := range again {
				res.failed = append(res.failed, fmt.Sprintf("%s: %v", t, err))
			}
			return res
		}
	}
	for i, s := range c.round(ctx, again) {
		if s.err != nil {
			res.failed = append(res.failed, fmt.Sprintf("%s did not answer the second scrape: %v", again[i], s.err))
			continue
		}
		res.rows = append(res.rows, vmtop.Rows(vmtop.Pair{
			First: before[i].fams, Second: s.fams, Elapsed: s.at.Sub(before[i].at), Node: again[i].node,
		})...)
	}
	vmtop.Sort(res.rows)
	return res
}
