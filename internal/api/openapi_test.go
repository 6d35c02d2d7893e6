package api

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

type openAPIDocument struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

var templateParam = regexp.MustCompile(`\{([^}/]+)\}`)

// samplePath fills an OpenAPI path template with plausible values.
func samplePath(tmpl string) string {
	return templateParam.ReplaceAllStringFunc(tmpl, func(p string) string {
		if p == "{id}" {
			return "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"
		}
		return "sample"
	})
}

// echoStyle turns "/a/{id}/b" into "/a/:id/b".
func echoStyle(tmpl string) string {
	return templateParam.ReplaceAllString(tmpl, ":$1")
}

// TestOpenAPIMatchesRoutes checks that every registered route is documented and every
// documented operation is routed. A documented path maps to a route either literally
// ({id} ↔ :id) or by routing: the one route /journal/:ref serves both
// /journal/{id} and /journal/{type}-events, so each documented path is also resolved
// through Echo's router with sample values.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc openAPIDocument
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	h := newHarness(t, nil)
	e := h.srv.Echo()

	routes := map[string]bool{} // "GET /journal/:ref"
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		routes[r.Method+" "+r.Path] = true
	}
	documented := map[string]bool{}
	covered := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			method = strings.ToUpper(method)
			if method == "PARAMETERS" || method == "SUMMARY" || method == "DESCRIPTION" {
				continue
			}
			documented[method+" "+path] = true
			if literal := method + " " + echoStyle(path); routes[literal] {
				covered[literal] = true
				continue
			}
			// Resolve a sample URL through the router: it must land on a registered
			// route for this very method (a 405 lands on a path without the method).
			c := e.NewContext(httptest.NewRequest(method, samplePath(path), nil), httptest.NewRecorder())
			e.Router().Find(method, samplePath(path), c)
			key := method + " " + c.Path()
			if !routes[key] {
				t.Errorf("documented %s %s is not routed (sample %s resolved to %q)", method, path, samplePath(path), c.Path())
				continue
			}
			covered[key] = true
		}
	}
	var undocumented []string
	for r := range routes {
		if !covered[r] {
			undocumented = append(undocumented, r)
		}
	}
	sort.Strings(undocumented)
	for _, r := range undocumented {
		t.Errorf("route %s is not in openapi.json", r)
	}
	if len(documented) < len(routes) {
		t.Errorf("%d documented operations for %d routes", len(documented), len(routes))
	}

	// Served as is.
	r := h.do(t, "GET", "/openapi.json", nil)
	if r.Code != 200 || string(r.Body) != string(OpenAPI()) || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Errorf("/openapi.json: %d %s", r.Code, r.Header.Get("Content-Type"))
	}
}

// TestOpenAPIRefsResolve catches a $ref to a schema that does not exist.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"\$ref":\s*"#/components/schemas/([^"]+)"`).FindAllSubmatch(OpenAPI(), -1) {
		if _, ok := doc.Components.Schemas[string(m[1])]; !ok {
			t.Errorf("$ref to missing schema %s", m[1])
		}
	}
}
