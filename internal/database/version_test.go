package database

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want Version
		bad  bool
	}{
		{in: "CockroachDB CCL v24.3.5 (x86_64-pc-linux-gnu, built 2025/01/30 17:10:49, go1.22.8 X:nocoverageredesign)", want: Version{24, 3, 5, ""}},
		{in: "CockroachDB OSS v23.2.12 (aarch64-unknown-linux-gnu, built 2024/10/01 00:00:00, go1.22.5)", want: Version{23, 2, 12, ""}},
		{in: "CockroachDB CCL v24.1.0-beta.2 (x86_64-pc-linux-gnu, built 2024/04/01, go1.22.1)", want: Version{24, 1, 0, "beta.2"}},
		{in: "CockroachDB CCL v25.2.0-alpha.00000000-1234-gabcdef (linux, built x, go1.23)", want: Version{25, 2, 0, "alpha.00000000-1234-gabcdef"}},
		{in: "v25.2", want: Version{25, 2, 0, ""}},
		{in: "24.1.7", want: Version{24, 1, 7, ""}},
		{in: "CockroachDB CCL (v24.3.5)", bad: true}, // only before the parenthesis
		{in: "", bad: true},
		{in: "CockroachDB CCL vX.Y", bad: true},
		{in: "CockroachDB v0.1.2", bad: true},
		{in: "CockroachDB v24.1.2.3", bad: true},
		{in: "CockroachDB v24.1.2-", bad: true},
		{in: "CockroachDB v24.1.2-b'eta", bad: true},
		{in: "CockroachDB v99999.1.2", bad: true},
		{in: strings.Repeat("v", maxVersionLen) + " v24.1.0", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrBadVersion) {
				t.Errorf("ParseVersion(%.60q) = %v, %v; want ErrBadVersion", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// Issue 19: nothing checked the version, and migrate failed halfway on v23.2.
func TestCheckVersion(t *testing.T) {
	tests := []struct {
		crdbVersion string
		wantErr     error
	}{
		{"", nil}, // PostgreSQL sends no crdb_version
		{"CockroachDB CCL v23.2.15 (x86_64-pc-linux-gnu, built 2024/11/01, go1.22.5)", ErrVersionTooOld},
		{"CockroachDB CCL v23.1.29 (x86_64-pc-linux-gnu, built 2024/11/01, go1.22.5)", ErrVersionTooOld},
		{"CockroachDB CCL v22.2.0 (x86_64-pc-linux-gnu, built 2022/12/01, go1.19)", ErrVersionTooOld},
		{"CockroachDB CCL v24.1.0-beta.1 (x86_64-pc-linux-gnu, built 2024/04/01, go1.22.1)", nil},
		{"CockroachDB CCL v24.1.0 (x86_64-pc-linux-gnu, built 2024/05/20, go1.22.1)", nil},
		{"CockroachDB CCL v25.2.4 (x86_64-pc-linux-gnu, built 2025/08/01, go1.23.7)", nil},
		{"CockroachDB CCL unknown", ErrBadVersion},
	}
	for _, tt := range tests {
		v, err := CheckVersion(tt.crdbVersion)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("CheckVersion(%q) = %v, %v; want %v", tt.crdbVersion, v, err, tt.wantErr)
		}
		if errors.Is(err, ErrVersionTooOld) && !strings.Contains(err.Error(), "v24.1 or later") {
			t.Errorf("the refusal %q does not name the minimum", err)
		}
	}
}

func TestCDCQueriesNeedLicense(t *testing.T) {
	for v, want := range map[Version]bool{
		{23, 2, 15, ""}: true, {24, 1, 6, ""}: true, {24, 1, 7, ""}: false,
		{24, 2, 4, ""}: true, {24, 2, 5, ""}: false, {24, 3, 0, ""}: false, {25, 2, 0, ""}: false,
	} {
		if got := v.CDCQueriesNeedLicense(); got != want {
			t.Errorf("%v.CDCQueriesNeedLicense() = %v, want %v", v, got, want)
		}
	}
}

// FuzzParseVersion: crdb_version comes from the server. No panic; what parses prints
// back to a tag that parses to the same version.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{
		"CockroachDB CCL v24.3.5 (x86_64-pc-linux-gnu, built 2025/01/30 17:10:49, go1.22.8)",
		"v24.1.0-beta.2", "24.1", "CockroachDB v", "v1..2", "v24.1.0-", "(v24.1.0)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if !errors.Is(err, ErrBadVersion) {
				t.Fatalf("error %v does not wrap ErrBadVersion", err)
			}
			return
		}
		if v.Major <= 0 || v.Minor < 0 || v.Patch < 0 {
			t.Fatalf("%q parsed to %+v", s, v)
		}
		again, err := ParseVersion(v.String())
		if err != nil || again != v {
			t.Fatalf("%q → %v does not round-trip: %v %v", s, v, again, err)
		}
	})
}
