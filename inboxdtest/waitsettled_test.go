package inboxdtest_test

import (
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/inboxdtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestWaitSettledIsBoundedOnAFrozenDatabase: WaitSettled ends by its within even when
// the database stops answering mid-query (a blackholed path). Its reads ran under
// context.Background(), so a frozen database held it forever.
func TestWaitSettledIsBoundedOnAFrozenDatabase(t *testing.T) {
	db := testenv.NewDB(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartFreezeProxy(t, u.Host)
	pool := db.OpenPool(t, func(c *pgxpool.Config) {
		host, port, _ := net.SplitHostPort(proxy.Addr)
		p, _ := strconv.Atoi(port)
		c.ConnConfig.Host, c.ConnConfig.Port = host, uint16(p)
	})
	t.Cleanup(proxy.Thaw) // before the pool closes (cleanups run last first)
	proxy.Freeze()

	kit, done := inboxdtest.Standalone(t.Name()) // its Fatalf panics: caught below
	defer done()
	ended := make(chan any, 1)
	go func() {
		defer func() { ended <- recover() }()
		inboxdtest.WaitSettled(kit, pool, "00000000-0000-0000-0000-000000000001", 300*time.Millisecond)
	}()
	select {
	case r := <-ended:
		if r == nil {
			t.Fatal("WaitSettled returned a status from a frozen database")
		}
	case <-time.After(15 * time.Second): // a bound for the test itself, not a measurement
		t.Fatal("WaitSettled(within 300ms) still waiting after 15s on a frozen database")
	}
}
