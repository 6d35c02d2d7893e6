// Package metrics defines every Prometheus metric inboxd exports, in one place, so that
// names and labels stay consistent across ingest, feed, processing and the API.
package metrics

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/inboxd/inboxd/internal/buildinfo"
)

// Metrics holds inboxd's collectors. Build one with New and share it.
type Metrics struct {
	Registry *prometheus.Registry
	own      []prometheus.Collector // inboxd's collectors, without the Go and process ones

	// Ingest (STOMP → journal).
	Received      *prometheus.CounterVec // by destination
	Duplicates    *prometheus.CounterVec // by destination
	Quarantined   *prometheus.CounterVec // by reason
	Committed     *prometheus.CounterVec // journal rows inserted, by destination
	Acked         *prometheus.CounterVec // by destination
	BatchSize     prometheus.Histogram
	CommitSeconds prometheus.Histogram
	Reconnects    *prometheus.CounterVec // by component (stomp, db)
	InflightBytes *prometheus.GaugeVec   // body bytes taken and not yet acked, by destination

	// Webhook (changefeed → inboxd).
	WebhookBatches *prometheus.CounterVec // by outcome (ok, bad_request, unauthorized, error)
	WebhookRows    *prometheus.CounterVec // by disposition (an outcome, ignored, poison, over_limit, joined: processed by a batch in flight)
	FeedResolved   prometheus.Gauge       // unix seconds of the latest resolved timestamp
	FeedLagSeconds prometheus.Gauge       // now - latest resolved, set when it is received

	// Processing.
	Processed      *prometheus.CounterVec // by event_type, outcome (processed, rejected, failed, dead, noop)
	ProcessSeconds *prometheus.HistogramVec
	Dead           prometheus.Gauge // DEAD rows in the journal, refreshed by the sweeper
	// ParkedAggregates and ParkedWaiting: aggregates held by a DEAD head, and the events
	// waiting behind them (refreshed by the sweeper).
	ParkedAggregates prometheus.Gauge
	ParkedWaiting    prometheus.Gauge
	SweeperRuns      prometheus.Counter
	SweeperPicked    *prometheus.CounterVec // by kind (retry, stranded)

	// Health: ages of the last progress (set through MarkIngestCommit and MarkProcessed),
	// and what the health monitor currently finds stuck.
	Stalled                  *prometheus.GaugeVec // 1 while a component is stuck, by component
	lastCommit, lastProgress atomic.Int64         // unix nanos; start time until the first

	// Outbox (handlers' emitted messages → broker).
	OutboxUnsent        prometheus.Gauge // rows not yet confirmed by the broker, refreshed by the relay
	OutboxOldestAge     prometheus.Gauge // seconds the oldest unsent row has waited
	OutboxPublished     prometheus.Counter
	OutboxPublishErrors prometheus.Counter
	OutboxDeleted       prometheus.Counter // sent rows removed by retention

	ShadowEvents *prometheus.CounterVec // shadow replay events, by result (same, differing, timed_out)
	ReplayItems  *prometheus.CounterVec // replay attempts, by outcome (processed, rejected, failed, dead)
}

// MarkIngestCommit records that an ingest batch was committed and acked just now.
func (m *Metrics) MarkIngestCommit() { m.lastCommit.Store(time.Now().UnixNano()) }

// MarkProcessed records that an event was processed (an outcome recorded) just now.
func (m *Metrics) MarkProcessed() { m.lastProgress.Store(time.Now().UnixNano()) }

func ageSeconds(v *atomic.Int64) func() float64 {
	return func() float64 { return time.Since(time.Unix(0, v.Load())).Seconds() }
}

// New registers inboxd's collectors, plus Go runtime and process collectors, in a new registry.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{Registry: r}
	f := func(c prometheus.Collector) { r.MustRegister(c); m.own = append(m.own, c) }

	m.Received = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_ingest_received_total", Help: "Messages received from the broker."}, []string{"destination"})
	m.Duplicates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_ingest_duplicates_total", Help: "Messages whose id was already journaled with the same payload."}, []string{"destination"})
	m.Quarantined = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_ingest_quarantined_total", Help: "Messages quarantined, by reason."}, []string{"reason"})
	m.Committed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_ingest_committed_total", Help: "New journal rows committed."}, []string{"destination"})
	m.Acked = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_ingest_acked_total", Help: "Messages acknowledged to the broker after commit."}, []string{"destination"})
	m.BatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inboxd_ingest_batch_size", Help: "Messages per ingest transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	m.CommitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inboxd_ingest_commit_seconds", Help: "Latency of one ingest transaction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.Reconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_reconnects_total", Help: "Reconnections after a lost broker or database connection."}, []string{"component"})
	m.InflightBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxd_ingest_inflight_bytes", Help: "Message body bytes taken from the broker and not yet acked (bounded by -max-inflight-bytes)."}, []string{"destination"})

	m.WebhookBatches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_webhook_batches_total", Help: "Changefeed webhook requests, by outcome."}, []string{"outcome"})
	m.WebhookRows = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_webhook_rows_total", Help: "Changefeed rows received, by disposition."}, []string{"disposition"})
	m.FeedResolved = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_feed_resolved_timestamp_seconds", Help: "Latest resolved timestamp received from the changefeed."})
	m.FeedLagSeconds = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_feed_watermark_lag_seconds", Help: "How far the changefeed's resolved timestamp trails the wall clock."})

	m.Processed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_process_outcomes_total", Help: "Processing outcomes by event type."}, []string{"event_type", "outcome"})
	m.ProcessSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "inboxd_process_seconds", Help: "Latency of one processing transaction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"event_type"})
	m.Dead = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_dead_events", Help: "Journal entries in status DEAD."})
	m.ParkedAggregates = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_parked_aggregates", Help: "Aggregates parked by a DEAD head (retry or skip it to move them on)."})
	m.ParkedWaiting = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_parked_waiting_events", Help: "Events waiting behind the DEAD heads of parked aggregates."})
	m.SweeperRuns = prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_sweeper_runs_total", Help: "Sweeper passes."})
	m.SweeperPicked = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_sweeper_picked_total", Help: "Events the sweeper picked up, by kind."}, []string{"kind"})

	m.OutboxUnsent = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_unsent", Help: "Outbox rows not yet published (confirmed by the broker)."})
	m.OutboxOldestAge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_oldest_unsent_age_seconds", Help: "How long the oldest unsent outbox row has waited."})
	m.OutboxPublished = prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_outbox_published_total", Help: "Outbox rows published and confirmed by the broker."})
	m.OutboxPublishErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_outbox_publish_errors_total", Help: "Failed outbox publishes (retried)."})
	m.OutboxDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_outbox_deleted_total", Help: "Sent outbox rows deleted by retention."})
	f(m.OutboxUnsent)
	f(m.OutboxOldestAge)
	f(m.OutboxPublished)
	f(m.OutboxPublishErrors)
	f(m.OutboxDeleted)
	m.ShadowEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_shadow_events_total", Help: "Events run by shadow replays, by result."}, []string{"result"})
	f(m.ShadowEvents)
	m.ReplayItems = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_replay_items_total", Help: "Replay attempts of events, by outcome."}, []string{"outcome"})
	f(m.ReplayItems)

	now := time.Now().UnixNano()
	m.lastCommit.Store(now)
	m.lastProgress.Store(now)
	m.Stalled = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxd_stalled", Help: "1 while a component (ingest, processing, feed) has work waiting and makes no progress, or keeps failing."}, []string{"component"})
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inboxd_ingest_last_commit_age_seconds", Help: "Seconds since this instance last committed and acked an ingest batch (since start before the first)."}, ageSeconds(&m.lastCommit)))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inboxd_process_last_success_age_seconds", Help: "Seconds since this instance last recorded a processing outcome (since start before the first)."}, ageSeconds(&m.lastProgress)))

	b := buildinfo.Read()
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inboxd_build_info", Help: "1, labelled with this binary's release, VCS revision and Go version (inboxd version).",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}}, func() float64 { return 1 }))

	for _, c := range []prometheus.Collector{m.InflightBytes, m.Stalled, m.Received, m.Duplicates, m.Quarantined, m.Committed, m.Acked, m.BatchSize,
		m.CommitSeconds, m.Reconnects, m.WebhookBatches, m.WebhookRows, m.FeedResolved, m.FeedLagSeconds,
		m.Processed, m.ProcessSeconds, m.Dead, m.ParkedAggregates, m.ParkedWaiting, m.SweeperRuns, m.SweeperPicked} {
		f(c)
	}
	return m
}

// RegisterWith registers inboxd's collectors (not the Go runtime and process ones, which
// an embedding program has already) with r as well, so that a program embedding inboxd
// exports them on its own endpoint.
func (m *Metrics) RegisterWith(r prometheus.Registerer) error {
	for _, c := range m.own {
		if err := r.Register(c); err != nil {
			for _, done := range m.own {
				if done == c {
					break
				}
				r.Unregister(done)
			}
			return fmt.Errorf("registering inboxd's metrics: %w", err)
		}
	}
	return nil
}
