package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/httpsec"
)

// Extension is a group of routes added to the API from outside its core, such as the
// demo's /registration: the core serves the journal and the operator's tools, and knows
// no business event.
type Extension struct {
	// Name identifies the extension in errors.
	Name string
	// Links are added to GET /'s _links.
	Links Links
	// OpenAPI is a JSON object with "paths" (and optionally "components" with
	// "schemas") merged into /openapi.json; a path or schema the core or another
	// extension has already is an error.
	OpenAPI []byte
	// Mount registers the routes.
	Mount func(m Mount)
}

// Mount is what an Extension registers its routes with: the API's Echo, its publisher
// (persistent, receipt-confirmed) and destination, and its conventions.
type Mount struct {
	Echo           *echo.Echo
	Publisher      Publisher
	Destination    string
	PublishTimeout time.Duration
	Log            *slog.Logger
}

// GET registers a GET route.
func (m Mount) GET(path string, h echo.HandlerFunc, mw ...echo.MiddlewareFunc) {
	m.Echo.GET(path, h, mw...)
}

// POST registers a POST route that, like every POST of the API, demands Content-Type:
// application/json (415 otherwise), which is what stops cross-site requests.
func (m Mount) POST(path string, h echo.HandlerFunc, mw ...echo.MiddlewareFunc) {
	m.Echo.POST(path, h, append(mw, httpsec.RequireJSON)...)
}

// mergeOpenAPI merges the extensions' paths and schemas into the core document.
func mergeOpenAPI(core []byte, exts []Extension) ([]byte, error) {
	if len(exts) == 0 {
		return core, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(core, &doc); err != nil {
		return nil, fmt.Errorf("reading the core OpenAPI document: %w", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	components, _ := doc["components"].(map[string]any)
	schemas, _ := components["schemas"].(map[string]any)
	for _, x := range exts {
		if len(x.OpenAPI) == 0 {
			continue
		}
		var frag struct {
			Paths      map[string]any `json:"paths"`
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(x.OpenAPI, &frag); err != nil {
			return nil, fmt.Errorf("reading the OpenAPI of extension %q: %w", x.Name, err)
		}
		if err := mergeNew(paths, frag.Paths, "path"); err != nil {
			return nil, fmt.Errorf("extension %q: %w", x.Name, err)
		}
		if err := mergeNew(schemas, frag.Components.Schemas, "schema"); err != nil {
			return nil, fmt.Errorf("extension %q: %w", x.Name, err)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing the OpenAPI document: %w", err)
	}
	return out, nil
}

// mergeNew adds src's entries to dst, refusing one dst has: an extension must not
// redefine the core's paths or schemas.
func mergeNew(dst, src map[string]any, what string) error {
	for k, v := range src {
		if _, ok := dst[k]; ok {
			return fmt.Errorf("OpenAPI %s %q is defined already", what, k)
		}
		dst[k] = v
	}
	return nil
}
