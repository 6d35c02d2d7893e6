package config

import (
	"reflect"
	"testing"

	"github.com/inboxd/inboxd"
)

// The flags' defaults and the library's are one table (package defaults): a command
// line with no flags and a Config{} resolve to the same settings. Each component's
// own zero-value handling is held to the same table by its package's
// TestZeroConfigTakesTheTable, so the three cannot drift.
func TestDefaultsAgree(t *testing.T) {
	flags := Defaults().Config
	lib := inboxd.Config{}.WithDefaults()
	if !reflect.DeepEqual(flags, lib) {
		ft, lv := reflect.ValueOf(flags), reflect.ValueOf(lib)
		for i := range ft.NumField() {
			if a, b := ft.Field(i).Interface(), lv.Field(i).Interface(); !reflect.DeepEqual(a, b) {
				t.Errorf("%s: the flags' default is %v, the library's %v", ft.Type().Field(i).Name, a, b)
			}
		}
	}
}
