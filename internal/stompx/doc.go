// Package stompx connects inboxd to its STOMP broker (ActiveMQ Classic, or RabbitMQ's
// STOMP plugin) with go-stomp/stomp/v3, and adds what that library leaves to its
// callers: dialing that honors a context, heart-beats tuned for ActiveMQ, and a
// Publisher whose sends are confirmed by a broker RECEIPT. Reconnects wait by
// internal/backoff. Where the brokers differ (prefetch, durable topic subscriptions,
// client ids, the virtual host), Dialect says how, in dialect.go alone.
//
// DialConn is the one way inboxd reaches the broker (ingest, the publisher, /readyz,
// inboxd publish), so TLS (stomp+ssl, see LoadTLS) applies to all of them alike, with
// verification on and no fallback to plaintext.
//
// go-stomp never reconnects: after an ERROR frame, an EOF or a heart-beat timeout the
// connection is dead for good. Callers redial (Publisher does it on its next call;
// internal/ingest does it in its run loop).
package stompx
