// Package sqlcheck holds no code: its test parses every SQL statement inboxd sends with
// CockroachDB's own parser and type-checks each expression that holds a placeholder the
// way CockroachDB's server does for a statement pgx prepares, with untyped placeholders.
// Only that test imports github.com/cockroachdb/cockroachdb-parser, and it lives in a module
// of its own (go.mod here, replacing github.com/inboxd/inboxd with ../..) so that neither
// the binary nor the library's go.mod, in every user's module graph, carries the parser.
// Go's internal rule is by import path, so this module may still import inboxd/internal/….
package sqlcheck
