package faults

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

var (
	toxiOnce   sync.Once
	toxiServer *toxiproxy.ApiServer
)

// Proxy is a TCP proxy on a free loopback port in front of an upstream
// address, run in-process by toxiproxy, that can add latency, blackhole the
// traffic and cut every connection.
type Proxy struct {
	p *toxiproxy.Proxy

	mu     sync.Mutex
	toxics []string // names of the toxics in place
}

// NewProxy starts a proxy to upstream, stopped when the test ends.
func NewProxy(tb testing.TB, name, upstream string) *Proxy {
	tb.Helper()
	toxiOnce.Do(func() {
		toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	})
	p := toxiproxy.NewProxy(toxiServer, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		tb.Fatalf("proxy to %s: %v", upstream, err)
	}
	tb.Cleanup(p.Stop)
	return &Proxy{p: p}
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.p.Listen }

// Latency delays the data in both directions by d.
func (p *Proxy) Latency(tb testing.TB, d time.Duration) {
	tb.Helper()
	for _, dir := range []string{"upstream", "downstream"} {
		p.add(tb, fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`, dir, dir, d.Milliseconds()))
	}
}

// Blackhole drops all data in both directions without closing any
// connection, like a partition or a host that lost power: the peers notice
// only by their own timeouts.
func (p *Proxy) Blackhole(tb testing.TB) {
	tb.Helper()
	for _, dir := range []string{"upstream", "downstream"} {
		p.add(tb, fmt.Sprintf(`{"name":"blackhole_%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, dir, dir))
	}
}

// Heal removes every toxic. Connections that were blackholed are closed
// (toxiproxy closes them as the toxic goes), so the peers see them end as
// a partition that heals finds TCP connections reset.
func (p *Proxy) Heal(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	names := p.toxics
	p.toxics = nil
	p.mu.Unlock()
	for _, name := range names {
		if err := p.p.Toxics.RemoveToxic(tb.Context(), name); err != nil {
			tb.Fatalf("removing toxic %s: %v", name, err)
		}
	}
}

// Cut closes every connection through the proxy and stops accepting new
// ones until Restore.
func (p *Proxy) Cut() { p.p.Stop() }

// Restore accepts connections again after Cut, on the same address.
func (p *Proxy) Restore(tb testing.TB) {
	tb.Helper()
	if err := p.p.Start(); err != nil {
		tb.Fatalf("restarting proxy: %v", err)
	}
}

func (p *Proxy) add(tb testing.TB, spec string) {
	tb.Helper()
	w, err := p.p.Toxics.AddToxicJson(strings.NewReader(spec))
	if err != nil {
		tb.Fatalf("adding toxic %s: %v", spec, err)
	}
	p.mu.Lock()
	p.toxics = append(p.toxics, w.Name)
	p.mu.Unlock()
}
