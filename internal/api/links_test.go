package api

import (
	"strings"
	"testing"
)

// A browser exploring from GET / by links, as the reference tutorial's readers do (the
// registration package tests the tutorial's own requests).
func TestLinks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var idx struct {
		Links Links `json:"_links"`
	}
	r := h.do(t, "GET", "/", nil)
	if r.Code != 200 {
		t.Fatalf("GET /: %d %s", r.Code, r.Body)
	}
	r.JSON(t, &idx)
	for _, rel := range []string{"self", "stats", "openapi", "journal"} {
		l, ok := idx.Links[rel]
		if !ok {
			t.Errorf("GET / has no %q link", rel)
			continue
		}
		if l.Templated {
			continue
		}
		// Every link leads somewhere that answers.
		if r := h.do(t, "GET", l.Href, nil); r.Code != 200 {
			t.Errorf("link %s → GET %s: %d %s", rel, l.Href, r.Code, r.Body)
		}
	}
	for _, path := range []string{"/journal"} {
		if r := h.do(t, "GET", path, nil); r.Code != 200 || !strings.Contains(string(r.Body), `"_links"`) {
			t.Errorf("GET %s: %d %s", path, r.Code, r.Body)
		}
	}

	// Entries and pages carry self and next links, and the next link walks the listing.
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{"n": 1}, map[string]any{"n": 2}, map[string]any{"n": 3})
	next := "/journal/registration-events?limit=2&order=asc"
	var walked []string
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatal("next links do not end")
		}
		var p page[entry]
		r := h.do(t, "GET", next, nil)
		if r.Code != 200 {
			t.Fatalf("GET %s: %d %s", next, r.Code, r.Body)
		}
		r.JSON(t, &p)
		if p.Links["self"].Href != next {
			t.Errorf("page self = %q, want %q", p.Links["self"].Href, next)
		}
		for _, e := range p.Items {
			walked = append(walked, e.ID)
			if e.Links["self"].Href != "/journal/"+e.ID || e.Links["events"].Href != "/journal/registration-events" {
				t.Errorf("entry links %v", e.Links)
			}
		}
		if (p.NextCursor == "") != (p.Links["next"].Href == "") {
			t.Errorf("next_cursor %q but next link %q", p.NextCursor, p.Links["next"].Href)
		}
		next = p.Links["next"].Href
	}
	if strings.Join(walked, ",") != strings.Join(ids, ",") {
		t.Errorf("walked %v, want %v", walked, ids)
	}
	var e entry
	h.do(t, "GET", "/journal/"+ids[0], nil).JSON(t, &e)
	if e.Links["self"].Href != "/journal/"+ids[0] || e.ID != ids[0] || e.Status == "" {
		t.Errorf("entry %+v", e)
	}
}
