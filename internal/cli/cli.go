// Package cli parses inboxd's command line and runs its subcommands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/config"
)

// command is one subcommand. run gets a context that is cancelled on the first
// SIGINT/SIGTERM; a second signal exits the process at once.
type command struct {
	summary string
	hidden  bool // internal: not listed by "inboxd help"
	// settings are the groups of settings (config.Group*) or single setting flags the
	// command uses, which its -h lists; nil: all of them.
	settings []string
	run      func(ctx context.Context, env *env, args []string) error
}

// env is what every subcommand shares.
type env struct {
	stdout, stderr io.Writer
	opts           Options
}

// Options are what the program running the command line brings.
type Options struct {
	// Handle gives "serve"'s Client the program's event handlers; -demo then adds the
	// demo's registration handler unless one handles its type.
	Handle func(*inboxd.Client)
}

var commands = map[string]command{}

// errUsage marks an error whose message is the usage already printed.
var errUsage = errors.New("usage")

// Main runs inboxd with args (without the program name) and returns the exit code.
func Main(args []string, stdout, stderr io.Writer, opts Options) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "inboxd: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	ctx, stop := signalContext(stderr)
	defer stop()
	if err := cmd.run(ctx, &env{stdout: stdout, stderr: stderr, opts: opts}, args[1:]); err != nil {
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintf(stderr, "inboxd %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "inboxd: exactly-once processing of at-least-once messages (ActiveMQ STOMP → journal → changefeed → handlers)")
	fmt.Fprintln(w, "\nUsage: inboxd <command> [flags]   (each flag also reads an INBOXD_* environment variable)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for name, cmd := range commands {
		if !cmd.hidden {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun \"inboxd <command> -h\" for a command's flags.")
}

// signalContext is cancelled by the first SIGINT or SIGTERM; the second forces exit.
// Its stop ends the watch too, also when it is waiting for that second signal: Main
// runs in-process in tests and in programs that embed the command line, where the
// first signal's graceful shutdown returns and the watching goroutine must not outlive it.
func signalContext(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	stopped, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case sig := <-ch:
			fmt.Fprintf(stderr, "inboxd: %s received, shutting down gracefully (send again to force)\n", sig)
			cancel()
		case <-ctx.Done():
			return
		}
		select {
		case sig := <-ch:
			fmt.Fprintf(stderr, "inboxd: second %s received, forcing exit\n", sig)
			os.Exit(130)
		case <-stopped:
		}
	}()
	return ctx, sync.OnceFunc(func() {
		signal.Stop(ch)
		close(stopped)
		cancel()
		<-exited
	})
}

// parseFlags parses a subcommand's flags with the shared configuration.
func parseFlags(e *env, name, synopsis string, args []string, extra func(fs *flag.FlagSet)) (*config.Config, *flag.FlagSet, error) {
	fs := flag.NewFlagSet("inboxd "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cfg := config.RegisterOnly(fs, commands[name].settings)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: inboxd %s %s\n\n%s\n\nFlags (each setting also reads its INBOXD_* variable):\n", name, strings.TrimSpace(synopsis), commands[name].summary)
		config.Usage(e.stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, errUsage
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if names := cfg.SecretsOnCommandLine(fs); len(names) > 0 {
		fmt.Fprintf(e.stderr, "inboxd: warning: %s on the command line can be read by every local user (ps); use the INBOXD_* variable or its _FILE variant\n",
			strings.Join(names, ", "))
	}
	return cfg, fs, nil
}
