package message

import (
	"errors"
	"fmt"
)

// MaxDestinationName bounds the name in /queue/<name> or /topic/<name>.
const MaxDestinationName = 200

// ErrInvalidDestination is wrapped by CheckDestination's errors.
var ErrInvalidDestination = errors.New("invalid destination")

// CheckDestination is the one rule for a destination inboxd publishes to, on behalf of
// a handler (outbox Emit) or an operator (re-inject): /queue/<name> or /topic/<name>,
// the name 1 to MaxDestinationName letters, digits or _.:-. Nothing else: a comma makes
// an ActiveMQ composite destination (one publish, several destinations), '*' and '>'
// are wildcards, and either would copy a message somewhere nobody named.
// https://activemq.apache.org/components/classic/documentation/composite-destinations
//
// RabbitMQ's /amq/queue/<name> (a queue declared outside STOMP) is accepted too, by the
// same rule (https://www.rabbitmq.com/docs/stomp, "Destinations"); ActiveMQ would take
// it for a queue of that odd name.
func CheckDestination(d string) error {
	name, ok := "", false
	for _, p := range []string{"/queue/", "/topic/", "/amq/queue/"} {
		if len(d) > len(p) && d[:len(p)] == p {
			name, ok = d[len(p):], true
		}
	}
	ok = ok && len(name) <= MaxDestinationName
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %q must be /queue/<name>, /topic/<name> or /amq/queue/<name>, the name at most %d letters, digits or _.:- "+
			"(no commas or wildcards: ActiveMQ would deliver to several destinations)", ErrInvalidDestination, Truncate(d, 80), MaxDestinationName)
	}
	return nil
}
