package config

import (
	"flag"
	"fmt"
	"io"
	"slices"
)

// groups are the headings of a command's -h, in the table's order: each holds the rows
// of defaults.Settings from its first flag to the next group's first.
var groups = []struct{ first, name string }{
	{"database-url", "Database"},
	{"stomp-addr", "Broker"},
	{"destination", "Destinations"},
	{"http-addr", "HTTP API"},
	{"webhook-addr", "Changefeed webhook (CockroachDB)"},
	{"batch-size", "Ingest"},
	{"migrate", "Schema and demo"},
	{"concurrency", "Processing"},
	{"outbox-poll-interval", "Outbox"},
	{"retention", "Retention"},
	{"shutdown-timeout", "Operations"},
	{"log-format", "Logging"},
}

// The groups by name, for the commands' lists.
const (
	GroupDatabase     = "Database"
	GroupBroker       = "Broker"
	GroupDestinations = "Destinations"
	GroupWebhook      = "Changefeed webhook (CockroachDB)"
	GroupSchema       = "Schema and demo"
	GroupProcessing   = "Processing"
	GroupRetention    = "Retention"
	GroupLogging      = "Logging"
)

// groupOf returns each setting's group, by flag.
func groupOf() map[string]string {
	out := map[string]string{}
	g := ""
	for _, s := range settings(&Config{}) {
		for _, h := range groups {
			if h.first == s.Flag {
				g = h.name
			}
		}
		out[s.Flag] = g
	}
	return out
}

// Usage prints fs's flags as a command's -h does: the command's own flags first, then
// the settings under the headings of their groups.
func Usage(w io.Writer, fs *flag.FlagSet) {
	of := groupOf()
	byGroup := map[string][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) { byGroup[of[f.Name]] = append(byGroup[of[f.Name]], f) })
	names := []string{""}
	for _, g := range groups {
		names = append(names, g.name)
	}
	for _, g := range names {
		fl := byGroup[g]
		if len(fl) == 0 {
			continue
		}
		heading := g
		if heading == "" {
			heading = "This command"
		}
		fmt.Fprintf(w, "\n%s:\n", heading)
		sub := flag.NewFlagSet("", flag.ContinueOnError)
		sub.SetOutput(w)
		for _, f := range fl {
			sub.Var(f.Value, f.Name, f.Usage)
			sub.Lookup(f.Name).DefValue = f.DefValue
		}
		sub.PrintDefaults()
	}
}

// only reports whether a setting's flag is defined for a command that uses only want
// (groups or single flags; nil: every setting).
func only(want []string, of map[string]string, flagName string) bool {
	return want == nil || slices.Contains(want, of[flagName]) || slices.Contains(want, flagName)
}
