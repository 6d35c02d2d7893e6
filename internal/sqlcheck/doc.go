// Package sqlcheck holds no code: its test parses every SQL statement inboxd sends with
// CockroachDB's own parser and type-checks each expression that holds a placeholder the
// way CockroachDB's server does for a statement pgx prepares, with untyped placeholders.
// Only that test imports github.com/cockroachdb/cockroachdb-parser, so the binary does not.
package sqlcheck
