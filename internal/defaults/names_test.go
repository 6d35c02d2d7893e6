package defaults

import (
	"context"
	"testing"
)

// TestSettingName: a hint names a setting as its caller sets it, the library's field
// for a program, the environment variable for the command line.
func TestSettingName(t *testing.T) {
	ctx := context.Background()
	if got := SettingName(ctx, "AdminToken", "INBOXD_ADMIN_TOKEN"); got != "Config.AdminToken" {
		t.Errorf("library: %q", got)
	}
	if got := SettingName(WithCommandLine(ctx), "AdminToken", "INBOXD_ADMIN_TOKEN"); got != "INBOXD_ADMIN_TOKEN" {
		t.Errorf("command line: %q", got)
	}
}
