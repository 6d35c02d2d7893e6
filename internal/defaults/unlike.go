package defaults

import (
	"fmt"
	"reflect"
	"slices"
)

// Unlike lists the fields of cfg, a component's Config whose zero values took their
// defaults, that differ from the default of their setting: the setting whose field is
// prefix+F, else F, the names by which the root package fills the component's Config.
// Fields listed in skip are left out (another setting's namesake). For the components'
// TestZeroConfigTakesTheTable, so that a field added with its setting is checked
// without an edit there.
func Unlike(cfg any, prefix string, skip ...string) []string {
	def := map[string]any{}
	for _, s := range Settings() {
		def[s.Field] = s.Default
	}
	var out []string
	v := reflect.ValueOf(cfg)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		want, ok := def[prefix+name]
		if !ok {
			want, ok = def[name]
		}
		if !ok || slices.Contains(skip, name) {
			continue
		}
		f := v.Field(i)
		if w := reflect.ValueOf(want); w.Type() != f.Type() && w.Type().ConvertibleTo(f.Type()) && w.Kind() == f.Kind() {
			want = w.Convert(f.Type()).Interface() // a named type of the setting's (ingest.AckMode)
		}
		if got := f.Interface(); !reflect.DeepEqual(got, want) {
			out = append(out, fmt.Sprintf("%s = %v, its setting's default is %v", name, got, want))
		}
	}
	return out
}
