package ingest

import "github.com/inboxd/inboxd/internal/stompx"

// noteDialect logs, once per destination, what the broker's dialect (stompx.Dialect)
// changes for this destination's guarantees.
func (se *session) noteDialect() {
	if !se.st.dialectNoted.CompareAndSwap(false, true) {
		return
	}
	d := se.conn.Dialect
	if !d.MessageIDIsStable() && se.cfg.IDSource.String() == "header:message-id" {
		se.log.Warn("id-source header:message-id on " + d.String() + ": this broker's message-id header is the delivery's " +
			"and changes on redelivery, so a redelivered message would be journaled as a new event; key events by a " +
			"payload field or a header the producer sets (RabbitMQ: amqp-message-id)")
	}
	if !d.GroupsMessages() && !stompx.IsTopic(se.dest) {
		se.log.Info(d.String() + " has no message groups: with several instances consuming this destination, one " +
			"aggregate's events may be journaled out of order; consume a queue declared with x-single-active-consumer " +
			"(as /amq/queue/<name>) to keep that order (docs/rabbitmq.md)")
	}
}
