package stompx

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
)

// Reachable is the readiness check of the broker: a STOMP CONNECT, not just TCP, so
// that a broker that accepts connections but refuses logins counts as down.
func Reachable(ctx context.Context, cfg Config) error {
	cfg.HeartBeat = -1
	conn, err := DialConn(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to the broker at %s: %w", cfg.Addr, err)
	}
	// The DISCONNECT receipt is bounded by ctx too: a broker that answered CONNECT and
	// then went silent must not hold a /readyz request, or a shutdown behind it, for the
	// receipt timeout.
	stop := context.AfterFunc(ctx, conn.Abort)
	err = conn.Close()
	if !stop() { // aborted: go-stomp's Disconnect then says nil
		err = fmt.Errorf("no DISCONNECT receipt: %w", context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("checking the broker at %s: %w", cfg.Addr, err)
	}
	return nil
}

// WaitReachable tries the broker until it answers, at least every second, and logs each
// try, so that inboxd started before its broker waits instead of failing. It returns
// ctx's error if ctx ends first.
func WaitReachable(ctx context.Context, cfg Config, log *slog.Logger) error {
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: 150 * time.Millisecond}} // 100-200 ms, doubling to 0.5-1 s
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := Reachable(tctx, cfg)
		cancel()
		if err == nil {
			if bo.Attempt() > 0 {
				log.Info("broker reachable", "addr", cfg.Addr, "tries", bo.Attempt()+1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("waiting for the broker", "addr", cfg.Addr, "try", bo.Attempt()+1, "err", err)
		if err := bo.Wait(ctx); err != nil {
			return err
		}
	}
}
