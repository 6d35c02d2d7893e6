// Package webhook receives a CockroachDB changefeed's webhook sink and hands the
// journal rows it names to the processing engine.
//
// It owns the changefeed envelope types (Batch, WrappedRow, CRDBMeta, ResolvedMessage),
// their decoders (Decode, and DecodeStream, which hands rows over one at a time), the
// Echo handler (Handler) and the resolved-timestamp watermark (StoreWatermark,
// ReadWatermark). Package webhook/sinktest is a client that behaves like the sink, for
// tests.
//
// Wiring:
//
//	engine := process.New(pool, registry, process.Config{}, m, log)
//	h := webhook.New(webhook.Config{AuthHeader: "Bearer " + token, Sink: "journal"}, engine, pool, m, log)
//	h.Register(e, "/changefeed")
//	defer h.Shutdown(ctx) // before the HTTP server's: batches outlive their requests
//
// Not a public API. New takes inboxd's internal types (the engine, the metrics), so
// nothing outside this module can call it, on purpose: a program embedding inboxd gets
// the webhook served by inboxd.Client (Config.WebhookAddr, on by default, off with
// DisableWebhook), with its TLS, token and outbox route wired as the command line does.
// Only the envelope types, Decode, DecodeStream and ParseHLC are meant for outside
// use, by tools that read a changefeed's payloads. The package stays at this path to
// keep merges easy; it belongs under internal/ and may move there.
package webhook
