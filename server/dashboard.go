package server

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// assets holds the dashboard: index.html, its script and style, and the
// vendored uPlot build (see assets/vendor/uplot/README.md).
//
//go:embed assets
var assets embed.FS

// openAPI is the API description served at /v1/openapi.json.
//
//go:embed openapi.json
var openAPI []byte

// dashboardCSP allows only the server's own scripts, styles and API.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handleDashboard serves the dashboard page.
func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) error {
	return serveAsset(w, r, "index.html")
}

// handleFavicon serves the dashboard's icon at the path browsers ask for
// by themselves.
func (s *Server) handleFavicon(w http.ResponseWriter, r *http.Request) error {
	return serveAsset(w, r, "favicon.svg")
}

// handleAsset serves one embedded file below /assets/.
func (s *Server) handleAsset(w http.ResponseWriter, r *http.Request) error {
	return serveAsset(w, r, r.PathValue("file"))
}

// serveAsset writes the embedded file name (relative to assets/).
func serveAsset(w http.ResponseWriter, r *http.Request, name string) error {
	if !fs.ValidPath(name) || strings.HasSuffix(name, "/") {
		return &httpError{status: http.StatusNotFound, msg: "no such asset"}
	}
	b, err := assets.ReadFile(path.Join("assets", name))
	if err != nil {
		return &httpError{status: http.StatusNotFound, msg: "no such asset"}
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
	return nil
}

// handleOpenAPI serves the OpenAPI 3 description of the API.
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(openAPI)
	}
	return nil
}
