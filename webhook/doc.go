// Package webhook receives a CockroachDB changefeed's webhook sink and hands the
// journal rows it names to the processing engine.
//
// It owns the changefeed envelope types (Batch, WrappedRow, CRDBMeta, ResolvedMessage),
// their decoder (Decode), the Echo handler (Handler) and the resolved-timestamp
// watermark (StoreWatermark, ReadWatermark). Package webhook/sinktest is a client that
// behaves like the sink, for tests.
//
// Wiring:
//
//	engine := process.New(pool, registry, process.Config{}, m, log)
//	h := webhook.New(webhook.Config{AuthHeader: "Bearer " + token, Sink: "journal"}, engine, pool, m, log)
//	h.Register(e, "/changefeed")
package webhook
