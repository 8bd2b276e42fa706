// Package telemetry gives lockd its OpenTelemetry metrics and traces.
//
// Metrics go to a Prometheus registry of their own, served by
// [Telemetry.MetricsHandler]: otelgrpc's rpc_server_* series (recorded by
// otelgrpc while traces are exported, by callMetrics' interceptors
// otherwise), redisotel's
// connection-pool series, the Go runtime and process collectors, and lockd's
// own lockd_* series (see [LockMetrics] and [TokenMetrics]).
//
// Traces are exported over OTLP/gRPC only when an endpoint is configured,
// through [Options.OTLPEndpoint] or the standard OTEL_EXPORTER_OTLP_ENDPOINT
// and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables; the exporter honours the
// other OTEL_EXPORTER_OTLP_* variables (headers, TLS, timeout, compression)
// and the SDK honours OTEL_TRACES_SAMPLER. Without an endpoint the tracer
// provider records nothing. Trace context travels as W3C traceparent and
// baggage headers.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// scopeName names lockd's own instruments.
const scopeName = "github.com/lockd/lockd/internal/telemetry"

// redisScope is the instrumentation scope of redisotel's instruments.
const redisScope = "github.com/redis/go-redis/extra/redisotel"

// Options configure [Setup]. The zero value is usable.
type Options struct {
	// ServiceName is the service.name resource attribute; "lockd" when
	// empty. OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
	ServiceName string
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// Logger reports where traces go and, with Global, OpenTelemetry's own
	// errors (failed exports); nothing is logged when nil.
	Logger *slog.Logger
	// OTLPEndpoint, if set, turns trace export on and overrides the
	// OTEL_EXPORTER_OTLP_*ENDPOINT variables: a URL such as
	// "http://collector:4317" (plaintext) or "https://collector:4317", or a
	// bare "host:port" (TLS).
	OTLPEndpoint string
	// Registry receives the metrics; a new registry of its own when nil, so
	// that several Telemetry values can live in one process.
	Registry *prometheus.Registry
	// Global also installs the providers, the propagator and an error
	// handler logging to Logger as OpenTelemetry's process-wide globals,
	// for libraries that use them. Only the process's main Telemetry should
	// set it.
	Global bool
}

// Telemetry owns lockd's meter and tracer providers. Its methods are safe
// for concurrent use.
type Telemetry struct {
	logger     *slog.Logger
	registry   *prometheus.Registry
	handler    http.Handler
	mp         *sdkmetric.MeterProvider
	tp         trace.TracerProvider
	sdkTP      *sdktrace.TracerProvider // nil when traces are not exported
	propagator propagation.TextMapPropagator
	grpcStats  stats.Handler // otelgrpc's, while traces are exported
	calls      *callMetrics  // otherwise

	locks     *LockMetrics
	tokens    *TokenMetrics
	security  *SecurityMetrics
	keepAlive atomic.Pointer[func() int64]
	serving   atomic.Pointer[func() bool]
	pools     pools

	rateLimits *RateLimitMetrics

	shutdownOnce sync.Once
	shutdownErr  error
}

// redisLatencyView gives redisotel's millisecond histograms buckets for
// Redis, where most commands take well under a millisecond, instead of the
// SDK's defaults, which start at 5.
var redisLatencyView = sdkmetric.NewView(
	sdkmetric.Instrument{Name: "db.client.connections.*_time", Scope: instrumentation.Scope{Name: redisScope}},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
		Boundaries: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
	}},
)

// Setup builds the providers described in the package documentation. Call
// [Telemetry.Shutdown] when done, to flush pending spans.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Telemetry{
		logger:     log,
		registry:   opts.Registry,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	if t.registry == nil {
		t.registry = prometheus.NewRegistry()
	}

	res, err := newResource(ctx, opts)
	if err != nil {
		return nil, err
	}

	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := t.registry.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil, fmt.Errorf("telemetry: register collector: %w", err)
		}
	}
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(t.registry),
		// Spelled out: lockd's documented series names depend on it.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// No otel_scope_* labels: every series carries exactly the labels
		// the metrics reference promises.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	t.mp = sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(exporter),
		sdkmetric.WithView(redisLatencyView),
	)
	t.handler = promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})

	if err := t.setupTracing(ctx, opts, res); err != nil {
		_ = t.mp.Shutdown(ctx)
		return nil, err
	}

	meter := t.mp.Meter(scopeName, metric.WithInstrumentationVersion(opts.ServiceVersion))
	if t.locks, err = newLockMetrics(meter); err == nil {
		t.rateLimits, err = newRateLimitMetrics(meter)
	}
	if err == nil {
		if t.tokens, err = newTokenMetrics(meter); err == nil {
			if err = t.registerGauges(meter); err == nil {
				if err = t.registerPoolMetrics(meter); err == nil {
					t.security, err = newSecurityMetrics(meter)
				}
			}
		}
	}
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}

	// Probes and tooling are not traffic: no spans, no rpc_server_*
	// series for them.
	notTraffic := filters.None(
		filters.HealthCheck(),
		filters.ServicePrefix("grpc.reflection."),
	)
	if t.sdkTP == nil && useLeanCallMetrics() {
		// No span is ever recorded: the same metric for less (see
		// callMetrics).
		if t.calls, err = newCallMetrics(t.mp, notTraffic); err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: instruments: %w", err)
		}
	} else {
		t.grpcStats = otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(t.tp),
			otelgrpc.WithMeterProvider(t.mp),
			otelgrpc.WithPropagators(t.propagator),
			otelgrpc.WithFilter(notTraffic),
		)
	}

	if opts.Global {
		otel.SetTracerProvider(t.tp)
		otel.SetMeterProvider(t.mp)
		otel.SetTextMapPropagator(t.propagator)
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("opentelemetry", "err", err)
		}))
	}
	return t, nil
}

// newResource describes this process: service name and version, the SDK,
// the host, then whatever OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say.
func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	name := opts.ServiceName
	if name == "" {
		name = "lockd"
	}
	kv := []attribute.KeyValue{semconv.ServiceName(name)}
	if opts.ServiceVersion != "" {
		kv = append(kv, semconv.ServiceVersion(opts.ServiceVersion))
	}
	// Later sources win: the environment has the last word.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(kv...),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	// A partial resource (a detector failed) is still worth having.
	return res, nil
}

// setupTracing builds the OTLP exporter and an SDK tracer provider when an
// endpoint is configured, and a no-op provider otherwise.
func (t *Telemetry) setupTracing(ctx context.Context, opts Options, res *resource.Resource) error {
	cfg, err := traceConfig(opts.OTLPEndpoint, os.Getenv)
	if err != nil {
		return err
	}
	if !cfg.enabled {
		t.tp = noop.NewTracerProvider()
		t.logger.Debug("trace export off: no OTLP endpoint configured")
		return nil
	}
	if cfg.protocol != "" && cfg.protocol != "grpc" {
		t.logger.Warn("lockd exports traces over OTLP/gRPC only; ignoring the requested protocol", "protocol", cfg.protocol)
	}
	exp, err := otlptracegrpc.New(ctx, cfg.options...)
	if err != nil {
		return fmt.Errorf("telemetry: otlp trace exporter: %w", err)
	}
	t.sdkTP = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.tp = t.sdkTP
	t.logger.Info("exporting traces over OTLP/gRPC", "endpoint", cfg.endpoint)
	return nil
}

// tracing says whether and where traces are exported.
type tracing struct {
	enabled  bool
	endpoint string // for the log, credentials redacted
	protocol string // the requested OTLP protocol, if any
	options  []otlptracegrpc.Option
}

// traceConfig decides trace export from the Options endpoint and the
// environment (read through getenv). An explicit endpoint wins; otherwise
// either OTLP endpoint variable turns export on, unless OTEL_SDK_DISABLED is
// true or OTEL_TRACES_EXPORTER is none.
func traceConfig(endpoint string, getenv func(string) string) (tracing, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	var c tracing
	c.protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if c.protocol == "" {
		c.protocol = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if endpoint != "" {
		c.enabled = true
		if strings.Contains(endpoint, "://") {
			u, err := url.Parse(endpoint)
			if err != nil || u.Host == "" {
				return tracing{}, fmt.Errorf("telemetry: OTLP endpoint %q is not a URL with a host", endpoint)
			}
			c.endpoint = u.Redacted()
			c.options = []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(endpoint)}
		} else {
			c.endpoint = endpoint
			c.options = []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(endpoint)}
		}
		return c, nil
	}
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(env("OTEL_TRACES_EXPORTER"), "none") {
		return tracing{}, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := env(k); v != "" {
			c.enabled = true
			c.endpoint = v
			if u, err := url.Parse(v); err == nil {
				c.endpoint = u.Redacted()
			}
			// The exporter reads the variables itself.
			return c, nil
		}
	}
	return tracing{}, nil
}

// registerGauges creates lockd_keepalive_streams and lockd_serving, read
// from the functions given to RegisterKeepAliveStreams and RegisterServing.
func (t *Telemetry) registerGauges(meter metric.Meter) error {
	_, err := meter.Int64ObservableGauge("lockd.serving",
		metric.WithDescription("1 while this replica serves, 0 while its health is NOT_SERVING (Redis does not answer, or it is shutting down)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if f := t.serving.Load(); f != nil {
				var v int64
				if (*f)() {
					v = 1
				}
				o.Observe(v)
			}
			return nil
		}),
	)
	if err != nil {
		return err
	}
	_, err = meter.Int64ObservableGauge("lockd.keepalive.streams",
		metric.WithDescription("Streams that keep a lease alive or watch an election (KeepAlive, Hold, Campaign, Observe) open on this replica."),
		metric.WithUnit("{stream}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if f := t.keepAlive.Load(); f != nil {
				o.Observe((*f)())
			}
			return nil
		}),
	)
	return err
}

// RegisterKeepAliveStreams sets the function that lockd_keepalive_streams
// reads at every scrape; it must be fast and safe for concurrent use. A later
// call replaces an earlier one; nil removes the series.
func (t *Telemetry) RegisterKeepAliveStreams(streams func() int64) {
	if streams == nil {
		t.keepAlive.Store(nil)
		return
	}
	t.keepAlive.Store(&streams)
}

// RegisterServing sets the function that lockd_serving reads at every
// scrape: whether the replica's health is SERVING. It must be fast and safe
// for concurrent use; nil removes the series.
func (t *Telemetry) RegisterServing(serving func() bool) {
	if serving == nil {
		t.serving.Store(nil)
		return
	}
	t.serving.Store(&serving)
}

// Locks returns the lock metrics, to pass as redislock.Options.Observer.
func (t *Telemetry) Locks() *LockMetrics { return t.locks }

// RateLimits returns the rate limit metrics, to pass as
// ratelimit.Options.Observer.
func (t *Telemetry) RateLimits() *RateLimitMetrics { return t.rateLimits }

// Tokens returns the token broker's metrics.
func (t *Telemetry) Tokens() *TokenMetrics { return t.tokens }

// Security returns the authentication, TLS and reload metrics.
func (t *Telemetry) Security() *SecurityMetrics { return t.security }

// MetricsHandler serves the registry in the Prometheus text format; lockd
// mounts it at /metrics.
func (t *Telemetry) MetricsHandler() http.Handler { return t.handler }

// GRPCServerOptions returns the options that instrument a gRPC server:
// otelgrpc's stats handler with this Telemetry's providers and propagator.
// Health checks and reflection are left out of both spans and metrics.
func (t *Telemetry) GRPCServerOptions() []grpc.ServerOption {
	if t.calls != nil {
		return t.calls.serverOptions()
	}
	return []grpc.ServerOption{grpc.StatsHandler(t.grpcStats)}
}

// TracerProvider returns the tracer provider: the SDK's when traces are
// exported, a no-op one otherwise.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// MeterProvider returns the meter provider behind MetricsHandler.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// Propagator returns the W3C trace-context and baggage propagator.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.propagator }

// Shutdown flushes pending spans and stops both providers, within ctx.
// Later calls return the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		if t.sdkTP != nil {
			if err := t.sdkTP.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: tracer provider: %w", err))
			}
		}
		if err := t.mp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: meter provider: %w", err))
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}
