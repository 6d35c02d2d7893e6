package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// echoExtension is an extension as a program would write one: a POST that publishes
// its body, a link, and its OpenAPI path.
func echoExtension() Extension {
	return Extension{
		Name:    "echo",
		Links:   Links{"echo": {Href: "/echo"}, "self": {Href: "/not-the-index"}},
		OpenAPI: []byte(`{"paths":{"/echo":{"post":{"responses":{"202":{"description":"published"}}}}},"components":{"schemas":{"Echo":{"type":"object"}}}}`),
		Mount: func(m Mount) {
			m.POST("/echo", func(c echo.Context) error {
				body, err := ReadBody(c)
				if err != nil {
					return err
				}
				if err := m.Publisher.Publish(c.Request().Context(), m.Destination, body, nil); err != nil {
					return Unavailable("broker unavailable", nil, err)
				}
				return c.NoContent(http.StatusAccepted)
			})
		},
	}
}

// The core has no business routes; an extension adds its routes, links and OpenAPI
// paths, and its POSTs follow the core's rules (JSON only, body cap).
func TestExtension(t *testing.T) {
	t.Parallel()
	bare := newHarness(t, nil)
	if r := bare.do(t, "POST", "/echo", `{}`); r.Code != http.StatusNotFound {
		t.Fatalf("POST /echo without the extension: %d", r.Code)
	}
	for _, p := range []string{"/registration", "/registration/", "/registration/form"} {
		if r := bare.do(t, "GET", p, nil); r.Code != http.StatusNotFound {
			t.Errorf("GET %s on the core API: %d, want 404 (the demo is an extension)", p, r.Code)
		}
	}
	if strings.Contains(string(OpenAPI()), `"/registration`) {
		t.Error("the core OpenAPI document names /registration")
	}

	h := newHarness(t, func(c *Config) { c.Extensions = []Extension{echoExtension()} })
	if r := h.do(t, "POST", "/echo", `{"a":1}`); r.Code != http.StatusAccepted {
		t.Fatalf("POST /echo: %d %s", r.Code, r.Body)
	}
	if sent := h.pub.Sent(); len(sent) != 1 || sent[0].Destination != testDestination || string(sent[0].Body) != `{"a":1}` {
		t.Fatalf("published %+v", sent)
	}
	expectError(t, h.do(t, "POST", "/echo", `{}`, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType)
	expectError(t, h.do(t, "POST", "/echo", strings.Repeat("x", 2<<20)), http.StatusRequestEntityTooLarge)

	var idx struct {
		Links Links `json:"_links"`
	}
	h.do(t, "GET", "/", nil).JSON(t, &idx)
	if idx.Links["echo"].Href != "/echo" || idx.Links["self"].Href != "/" {
		t.Errorf("index links %v: want the extension's echo, and the core's own self", idx.Links)
	}
	var doc struct {
		Paths      map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	h.do(t, "GET", "/openapi.json", nil).JSON(t, &doc)
	if doc.Paths["/echo"] == nil || doc.Paths["/journal/{id}"] == nil || doc.Components.Schemas["Echo"] == nil || doc.Components.Schemas["Entry"] == nil {
		t.Errorf("merged document lacks /echo, a core path, or a schema: %d paths", len(doc.Paths))
	}
}

// An extension cannot redefine the core's paths or schemas, nor bring a broken document.
func TestExtensionOpenAPIConflicts(t *testing.T) {
	t.Parallel()
	for name, frag := range map[string]string{
		"core path":   `{"paths":{"/journal/{id}":{}}}`,
		"core schema": `{"components":{"schemas":{"Entry":{}}}}`,
		"not JSON":    `{`,
	} {
		t.Run(name, func(t *testing.T) {
			x := echoExtension()
			x.OpenAPI = []byte(frag)
			if _, err := mergeOpenAPI(openAPIDoc, []Extension{x}); err == nil || !strings.Contains(err.Error(), `"echo"`) {
				t.Errorf("merge = %v, want an error naming the extension", err)
			}
		})
	}
	if _, err := mergeOpenAPI(openAPIDoc, []Extension{echoExtension(), echoExtension()}); err == nil {
		t.Error("two extensions with one path merged")
	}
}
