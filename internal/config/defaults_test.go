package config

import (
	"reflect"
	"testing"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/defaults"
)

// The flags' defaults and the library's are one table (package defaults): a command
// line with no flags and a Config{} resolve to the same settings. Each component's
// own zero-value handling is held to the same table by its package's
// TestZeroConfigTakesTheTable, so the three cannot drift.
func TestDefaultsAgree(t *testing.T) {
	flags := Defaults().Config
	lib := inboxd.Config{}.WithDefaults()
	// The settings where an embedding program's default differs from a service's: the
	// API on loopback, and the webhook (with its certificate directory) only on
	// CockroachDB unless asked for (inboxd.Config's docs).
	lib.HTTPAddr, lib.WebhookAddr, lib.CertDir = defaults.HTTPAddr, defaults.WebhookAddr, defaults.CertDir
	if !reflect.DeepEqual(flags, lib) {
		ft, lv := reflect.ValueOf(flags), reflect.ValueOf(lib)
		for i := range ft.NumField() {
			if a, b := ft.Field(i).Interface(), lv.Field(i).Interface(); !reflect.DeepEqual(a, b) {
				t.Errorf("%s: the flags' default is %v, the library's %v", ft.Type().Field(i).Name, a, b)
			}
		}
	}
}
