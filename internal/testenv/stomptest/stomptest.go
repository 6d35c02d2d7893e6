// Package stomptest turns the test brokers of internal/testenv into stompx
// configurations (testenv itself sits below stompx and cannot name its types).
package stomptest

import (
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Config is how the tests reach the test broker at addr (ActiveMQ, or the RabbitMQ
// node, whose login, virtual host and dialect it fills in).
func Config(addr string) stompx.Config {
	b := testenv.BrokerFor(addr)
	return stompx.Config{Addr: addr, Login: b.Login, Passcode: b.Passcode, Host: b.Host, Broker: stompx.Broker(b.Name)}
}
