package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/ingest"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/stompx"
)

func init() {
	commands["subscriptions"] = command{
		settings: []string{config.GroupDatabase, config.GroupBroker, config.GroupDestinations},
		summary:  "list inboxd's durable topic subscriptions, or remove an abandoned one: list|remove",
		run:      runSubscriptions,
	}
}

// subscriptionRow is one line of "subscriptions list".
type subscriptionRow struct {
	journal.Subscription
	// State: active (a connection holds the client id: an instance is consuming),
	// inactive (the broker keeps every message for it until it is resumed or removed),
	// removed, or unknown (the broker could not be asked).
	State      string `json:"state"`
	Configured bool   `json:"configured"` // the current configuration consumes it
}

func runSubscriptions(ctx context.Context, e *env, args []string) error {
	const synopsis = "list [-json] | remove [-force] <client-id> [<subscription-name>]"
	if len(args) == 0 || (args[0] != "list" && args[0] != "remove") {
		fmt.Fprintln(e.stderr, "Usage: inboxd subscriptions "+synopsis)
		return errUsage
	}
	action := args[0]
	var asJSON, force bool
	cfg, fs, err := parseFlags(e, "subscriptions", synopsis, args[1:], func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "list: print JSON")
		fs.BoolVar(&force, "force", false, "remove: also remove a subscription the current configuration consumes")
	})
	if err != nil {
		return err
	}
	// The configured pool and dialer, as every command: the password file, and the
	// broker's TLS (a plaintext CONNECT would carry the passcode in clear).
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	broker := cfg.Stomp(nil)
	broker.DialTimeout = 5 * time.Second
	if action == "list" {
		if fs.NArg() != 0 {
			return fmt.Errorf("list takes no arguments, got %q", fs.Args())
		}
		return listSubscriptions(ctx, e, cfg, pool, broker, asJSON)
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(e.stderr, "Usage: inboxd subscriptions remove [-force] <client-id> [<subscription-name>]")
		return errUsage
	}
	clientID, name := fs.Arg(0), cfg.SubscriptionName
	if fs.NArg() == 2 {
		name = fs.Arg(1)
	}
	return removeSubscription(ctx, e, cfg, pool, broker, clientID, name, force)
}

// configured returns the durable subscriptions the configuration consumes.
func configured(cfg *config.Config) map[[2]string]string {
	out := map[[2]string]string{}
	if cfg.NonDurableTopics {
		return out
	}
	for _, d := range cfg.Destinations {
		if stompx.IsTopic(d) {
			ds := ingest.DurableFor(cfg.ClientID, cfg.SubscriptionName, d)
			out[[2]string{ds.ClientID, ds.Name}] = d
		}
	}
	return out
}

func subscriptionsTable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w (run inboxd migrate)", err)
	}
	return err
}

func listSubscriptions(ctx context.Context, e *env, cfg *config.Config, pool *pgxpool.Pool, broker stompx.Config, asJSON bool) error {
	subs, err := journal.Subscriptions(ctx, pool)
	if err != nil {
		return subscriptionsTable(err)
	}
	conf := configured(cfg)
	rows := make([]subscriptionRow, 0, len(subs))
	for _, s := range subs {
		r := subscriptionRow{Subscription: s, Configured: conf[[2]string{s.ClientID, s.Name}] != ""}
		switch {
		case s.RemovedAt != nil:
			r.State = "removed"
		default:
			// Connecting with the client id is the one question STOMP can ask: the broker
			// refuses it while an instance holds the subscription.
			probe := broker
			probe.ClientID = s.ClientID
			inUse, err := stompx.ClientIDInUse(ctx, probe)
			switch {
			case errors.Is(err, stompx.ErrNoClientIDs):
				r.State = "unknown"
			case err != nil:
				r.State = "unknown"
				fmt.Fprintf(e.stderr, "inboxd subscriptions: asking the broker about client id %q: %v\n", s.ClientID, err)
			case inUse:
				r.State = "active"
			default:
				r.State = "inactive"
			}
		}
		rows = append(rows, r)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(e.stdout, "no durable subscriptions recorded (inboxd creates one per /topic/ destination)")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLIENT ID\tSUBSCRIPTION\tDESTINATION\tSTATE\tCONFIGURED\tLAST SUBSCRIBED")
	for _, r := range rows {
		conf := "no"
		if r.Configured {
			conf = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ClientID, r.Name, r.Destination, r.State, conf,
			r.LastSubscribedAt.UTC().Format(time.RFC3339))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.State == "inactive" && !r.Configured {
			fmt.Fprintf(e.stdout, "\n%s/%s is inactive and no longer configured: the broker keeps every message published to %s for it.\n"+
				"Remove it with: inboxd subscriptions remove %s %s\n", r.ClientID, r.Name, r.Destination, r.ClientID, r.Name)
		}
	}
	return nil
}

// recordedDestination is the topic of a recorded durable subscription ("" if unknown):
// RabbitMQ keys a durable subscription by its id and its destination.
func recordedDestination(ctx context.Context, pool *pgxpool.Pool, clientID, name string) string {
	subs, err := journal.Subscriptions(ctx, pool)
	if err != nil {
		return ""
	}
	for _, s := range subs {
		if s.ClientID == clientID && s.Name == name {
			return s.Destination
		}
	}
	return ""
}

func removeSubscription(ctx context.Context, e *env, cfg *config.Config, pool *pgxpool.Pool, broker stompx.Config,
	clientID, name string, force bool) error {
	if dest := configured(cfg)[[2]string{clientID, name}]; dest != "" && !force {
		return fmt.Errorf("%s/%s is the durable subscription of configured destination %s: removing it drops every "+
			"message it holds, and inboxd recreates it empty at its next start, losing whatever is published in between. "+
			"Change the configuration first, or pass -force", clientID, name, dest)
	}
	broker.ClientID = clientID
	err := stompx.RemoveDurable(ctx, broker, name, recordedDestination(ctx, pool, clientID, name))
	switch {
	case errors.Is(err, stompx.ErrClientIDInUse):
		return fmt.Errorf("client id %q is in use, most likely by a running inboxd consuming this subscription: stop it "+
			"first (the broker refuses to remove an active durable subscription): %w", clientID, err)
	case errors.Is(err, stompx.ErrNoSuchSubscription):
		known, merr := journal.MarkSubscriptionRemoved(ctx, pool, clientID, name)
		if merr != nil {
			return subscriptionsTable(merr)
		}
		if !known {
			return fmt.Errorf("neither the broker nor inboxd's records know durable subscription %s/%s: %w", clientID, name, err)
		}
		fmt.Fprintf(e.stdout, "the broker has no durable subscription %s/%s (any more); marked removed\n", clientID, name)
		return nil
	case err != nil:
		return err
	}
	if _, err := journal.MarkSubscriptionRemoved(ctx, pool, clientID, name); err != nil {
		return fmt.Errorf("removed %s/%s on the broker, but recording it failed: %w", clientID, name, subscriptionsTable(err))
	}
	fmt.Fprintf(e.stdout, "removed durable subscription %s/%s and every message it held\n", clientID, name)
	return nil
}
