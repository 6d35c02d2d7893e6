package testenv

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// skipExamplesWithoutServices lets a contributor without the services run a package's
// tests by hand: its Examples, which run against PostgreSQL and ActiveMQ and cannot
// skip themselves, are skipped (-test.skip) under -short, and when either service is
// unreachable unless CI=true (then they run, and fail). A -test.skip given stays.
func skipExamplesWithoutServices() {
	flag.Parse() // m.Run would; testing.Short needs it
	if f := flag.Lookup("test.skip"); f == nil || f.Value.String() != "" {
		return
	}
	if testing.Short() {
		_ = flag.Set("test.skip", "^Example")
		return
	}
	if os.Getenv("CI") == "true" {
		return
	}
	pg := "127.0.0.1:5432"
	if u, err := url.Parse(AdminURL()); err == nil && u.Host != "" {
		pg = u.Host
	}
	for _, addr := range []string{pg, StompAddr()} {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			_ = flag.Set("test.skip", "^Example")
			fmt.Fprintf(os.Stderr, "testenv: %s unreachable, Examples skipped (set CI=true to fail instead)\n", addr)
			return
		}
		conn.Close()
	}
}
