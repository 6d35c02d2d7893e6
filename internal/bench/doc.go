// Package bench measures inboxd against the real ActiveMQ and database and prints one
// table whose ratios come from the same run ("inboxd bench", "inboxd bench -quick").
//
// Rows:
//
//  1. broker: a bare STOMP consumer draining N pre-published persistent messages with
//     auto-ack and no database, the ceiling any consumer can reach.
//  2. naive: one INSERT … ON CONFLICT DO NOTHING transaction per message, then an
//     individual ack.
//  3. ingest: the real subscriber (internal/ingest) over the same N messages (30%
//     duplicates, 1% malformed), verified exactly afterwards: the journal holds exactly
//     the unique valid ids, the quarantine exactly the malformed messages, and the queue
//     is empty (every message acked).
//  4. e2e-sweeper, e2e-webhook: publish → PROCESSED at a fixed offered rate (-rate,
//     1,000 msg/s). Latency = journal.processed_at − the payload's "sentAt", which the
//     publisher stamps just before SEND (both clocks are this machine's; processed_at is
//     the processing transaction's now(), its start). The webhook path runs the real
//     webhook handler over HTTPS, fed by a stand-in for the CockroachDB changefeed that
//     polls the journal every 20 ms and flushes like the sink (100 messages or
//     -feed-flush), posting through webhook/sinktest.
//  5. journal-size: the ingest and e2e-max rows again, on a journal pre-filled with
//     -journal-size settled entries (default 10 M, written once per run and copied for
//     each measurement; not in -quick), each with its drain time as a ratio to the same
//     row on an empty journal in the same repetition. Only the row's own entries are
//     checked afterwards.
//  6. backlog: at each -backlog level (default 0, 100 k and 1 M), -backlog-heads
//     aggregates whose head is FAILED and due in an hour with that many RECEIVED events
//     behind them, written by one INSERT … generate_series (journal.SeedBlocked), not
//     through the broker. journal.ClaimHeads (limit 100) is timed 20 times on that
//     state, then -backlog-fresh events of other aggregates are published and drained by
//     ingest and the engine as in e2e-max. The drain time is given as a ratio to the
//     first level's (issue 20: at most 1.5× at 100 k), and the claim's p50/p99.
//  7. river-ingest, river: the same inbox built with River v0.51.2 as River's docs
//     build one (internal/riverbench, a module and binary of their own, inboxd-river:
//     the library's go.mod does not name River). The consumer inserts one unique job per
//     event id per batch (InsertManyTx, UniqueOpts{ByArgs: true}) and acks after the
//     commit; river's workers (-river-workers 200, -river-fetch-cooldown 10ms) write the
//     demo's effect and complete the job with JobCompleteTx in one transaction. They are
//     checked like ingest and e2e-max (one job per unique valid id, the malformed
//     messages rejected, every job completed with its customer) and set beside them:
//     "ingest 1.3× this", "e2e-max 3.9× this".
//  8. shadow: a shadow replay (internal/replay, as Client.ShadowReplay runs it) over the
//     events the e2e-max row has just processed, on its database (at most -shadow-limit,
//     oldest first): each handler run in a transaction that is rolled back and compared
//     with what was recorded. Its events/s is set beside e2e-max's over the same events
//     in the same repetition; afterwards every table's checksum must be unchanged and no
//     event may differ (the handler is unchanged).
//  9. replay-live: e2e-sweeper at -rate while a replay run reprocesses a history at its
//     rate limit (-replay-rate, 50 events/s): -replay-events registrations (default:
//     enough to outlast the measured phase) on -replay-aggregates aggregates of their
//     own, published and processed before the warm-up, then planned, started with their
//     emissions suppressed, and run by the replay part (replay.RunRunning) of the child,
//     beside ingest and processing. Its p99 is set beside e2e-sweeper's at the same rate
//     in the same repetition, and the replay's achieved rate over the measured phase is
//     given; the replay must still be running when the phase ends.
//
// Processing's own cost, apart from the handler's: the e2e-max row's note gives the
// statements and round trips per processing transaction, inboxd's and the demo
// handler's (a txstats tracer on the child's pool), and every drained row's the WAL
// bytes per message (pg_stat_wal) and, when the cluster behind -admin-url loads
// pg_stat_statements, PostgreSQL's time per event split into processing's own
// statements, the handler's, ingest's and BEGIN/COMMIT (pgstat.go).
//
// The header gives a CPU calibration (seconds for one core to SHA-256 300 MiB) at the
// start and the end of the run, and each row the load average and a calibration sample
// taken when it started: the machine's speed drifts, and a figure is read beside them.
//
// # How a row is measured
//
// Every row runs in a child process (this binary's hidden "bench-row"), so that its CPU
// time comes from the kernel's rusage of that process alone (user + system). Its peak
// RSS is the child's own VmHWM: ru_maxrss is not usable as is on Linux, because Go
// starts children with vfork semantics and exec folds the parent's high-water mark into
// the child's maxrss (it is still recorded, as rusage_maxrss_bytes). The parent creates
// the row's queue and database (dropped afterwards), pre-publishes the messages (not
// measured), starts the child, and checks the outcome after the child has exited.
// msg/s is N over the child's own subscription → last-message-done time; the parent's
// start → result time is recorded too (wall_seconds). The broker's and the database's
// CPU are read from /proc for the processes listening on their ports, and the whole
// host's from /proc/stat: they include other clients of the shared services.
//
// Rows run repetition after repetition (-reps), so that drift in the host's load
// touches every row of a repetition alike; ratios are taken within a repetition and the
// table shows medians. -sweep runs the ingest row once per configuration of a matrix.
package bench
