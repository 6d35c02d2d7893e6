// Package console is inboxd's operator console at /ui/: a few server-rendered pages
// (html/template) and one plain JavaScript file, embedded in the binary, with no build
// step, no framework and no CDN.
//
// The pages carry no data. The script fills them from the REST API (internal/api),
// sending the token the operator typed into the sign-in page, kept in sessionStorage
// and sent as "Authorization: Bearer". So the console shows exactly what the API
// returns, and the API's access rules (admin token, journal read access) are the only
// ones: someone who may not read the journal gets the API's 401 in the page, not its
// data. A bearer header is never sent by the browser on its own, so another site cannot
// make it for the operator (CSRF); POSTs are JSON, and the API refuses cross-origin
// state-changing browser requests besides.
//
// Every page is served with a strict Content-Security-Policy: scripts, styles and
// connections from this origin only, no inline script or style, no framing.
package console
