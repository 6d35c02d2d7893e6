package release

import (
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestParse(t *testing.T) {
	const commit = "f1b8aa05e53898ad071c56e84a0fe3bb576acd28"
	for _, tt := range []struct {
		in      string
		want    Release
		wantErr string
	}{
		{"# c\n\nv0.0.0 " + commit + " 16 pre-release baseline\n", Release{"v0.0.0", commit, 16, "pre-release baseline"}, ""},
		{"v0.0.0 " + commit + " 16\nv0.1.0 " + commit + " 17\n", Release{"v0.1.0", commit, 17, ""}, ""},
		{"0.1.0 " + commit + " 16\n", Release{}, "vMAJOR"},
		{"v0.1.0 f1b8aa0 16\n", Release{}, "40-hex"},
		{"v0.1.0 " + commit + " x\n", Release{}, "last migration"},
		{"# nothing\n", Release{}, "no release"},
	} {
		rs, err := Parse(strings.NewReader(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || rs[len(rs)-1] != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want last %+v", tt.in, rs, err, tt.want)
		}
	}
}

// The repository's own RELEASES parses, and its last release is what the tests build.
func TestRepositoryReleases(t *testing.T) {
	if _, err := Last("../../RELEASES"); err != nil {
		t.Fatal(err)
	}
}
