package metrics

import (
	"testing"

	"github.com/inboxd/inboxd/internal/buildinfo"
)

// inboxd_build_info is 1, labelled with the release, revision and Go version.
func TestBuildInfo(t *testing.T) {
	mfs, err := New().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := buildinfo.Read()
	for _, mf := range mfs {
		if mf.GetName() != "inboxd_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != want.Version || labels["revision"] != want.Revision || labels["goversion"] != want.GoVersion {
			t.Errorf("inboxd_build_info = %v %v, want 1 %+v", m.GetGauge().GetValue(), labels, want)
		}
		return
	}
	t.Error("no inboxd_build_info metric")
}
