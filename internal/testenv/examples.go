package testenv

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"
)

// skipExamplesWithoutServices lets a contributor without the services run a package's
// tests by hand: its Examples, which run against PostgreSQL and ActiveMQ and cannot
// skip themselves, are skipped (-test.skip) when either is unreachable. When CI=true
// they run, and fail.
func skipExamplesWithoutServices() {
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
