package replay_test

import (
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
