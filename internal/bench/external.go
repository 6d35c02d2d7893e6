package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/go-stomp/stomp/v3"
)

// What a row run by another program needs: the River rows run in a binary of their own
// (internal/riverbench, a module of its own so that the library's go.mod does not name
// River), which speaks the same protocol as "inboxd bench-row".

// RowResult is a child's report (see RowMain).
type RowResult = rowResult

// WriteResult writes res as the child's result line, with this process's peak RSS.
func WriteResult(w io.Writer, res RowResult) error {
	res.PeakRSS = selfPeakRSS()
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", lineResult, b)
	return err
}

// Dial opens a STOMP connection as the bench's own rows do.
func Dial(ctx context.Context, addr string) (*stomp.Conn, error) { return dial(ctx, addr) }
