// Package chaos holds inboxd's fault-injection run (make chaos), a test behind the
// "chaos" build tag so that make test leaves it out.
//
// It builds inboxd, starts its own ActiveMQ and its own PostgreSQL cluster (initdb on a
// free port: a real database, crashed and restarted for real, that disturbs nothing
// else on the machine), runs two inboxd instances on one queue, and publishes
// registrations with duplicates and malformed messages while it kills one instance with
// SIGKILL again and again, restarts the broker, crash-restarts the database, and keeps
// the database down for 10 s. Then it checks exact invariants and prints recovery times
// and the journaled→PROCESSED latency percentiles.
package chaos
