// Package hook lets the public test kit (package inboxdtest) hand a public
// inboxd.Handler to the engine exactly as Client.Handle does. Package inboxd sets
// EngineHandler when it is initialised: no package below inboxd may import it, and its
// wrapper (which reads Event.Key) is unexported.
package hook

import (
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/process"
)

// EngineHandler wraps h, an inboxd.Handler (or BatchHandler), for the engine, reading
// Event.Key with src. Set by package inboxd.
var EngineHandler func(h any, src message.IDSource) process.Handler
