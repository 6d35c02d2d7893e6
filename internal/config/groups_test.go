package config

import "testing"

// TestEverySettingHasAGroup: each group starts at a setting of the table, and every
// setting falls in a group, so that -h lists each under a heading.
func TestEverySettingHasAGroup(t *testing.T) {
	flags := map[string]bool{}
	for _, s := range settings(&Config{}) {
		flags[s.Flag] = true
	}
	for _, g := range groups {
		if !flags[g.first] {
			t.Errorf("group %q starts at %q, which is no setting", g.name, g.first)
		}
	}
	for flag, g := range groupOf() {
		if g == "" {
			t.Errorf("setting %s is in no group", flag)
		}
	}
}
