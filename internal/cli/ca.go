package cli

import (
	"context"
	"fmt"

	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/config"
)

func init() {
	commands["ca"] = command{settings: []string{config.GroupWebhook}, summary: "print the webhook's CA as base64 PEM, the value of the changefeed's ca_cert= (generates it if needed)", run: runCA}
}

func runCA(_ context.Context, e *env, args []string) error {
	cfg, _, err := parseFlags(e, "ca", "[flags]", args, nil)
	if err != nil {
		return err
	}
	b, err := certs.Load(certs.Config{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Dir: cfg.CertDir, Hosts: cfg.CertHosts})
	if err != nil {
		return fmt.Errorf("loading the webhook certificate: %w", err)
	}
	if b.CABase64 == "" {
		return fmt.Errorf("the configured certificate came without a CA file; pass the changefeed insecure_tls_skip_verify or your CA")
	}
	fmt.Fprintln(e.stdout, b.CABase64)
	return nil
}
