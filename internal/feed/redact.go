package feed

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Redacted replaces secrets in what Redact returns.
const Redacted = "redacted"

// secretParams are sink URI parameters never printed: keys and certificates (the CA is
// not secret but is kilobytes of noise in a status line).
var secretParams = map[string]bool{
	"ca_cert": true, "client_cert": true, "client_key": true,
	"api_secret": true, "sasl_password": true, "sasl_client_secret": true,
}

// RedactSinkURI hides credentials and certificate parameters of a sink URI. It never
// fails: a URI it cannot parse is replaced entirely.
func RedactSinkURI(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Redacted
	}
	if u.User != nil {
		if _, hasPass := u.User.Password(); hasPass {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		}
	}
	if u.Fragment != "" || u.RawFragment != "" {
		// Sinks have no use for a fragment; whatever follows '#' is hidden wholesale.
		u.Fragment, u.RawFragment = Redacted, ""
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = Redacted
		} else {
			keys := make([]string, 0, len(q))
			for k := range q {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				for _, v := range q[k] {
					if secretParams[strings.ToLower(k)] {
						v = Redacted
					}
					parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(v))
				}
			}
			u.RawQuery = strings.Join(parts, "&")
		}
	}
	return u.String()
}

var (
	// A quoted SQL literal holding a URI: 'scheme://…' with '' as an escaped quote.
	quotedURIRe = regexp.MustCompile(`'([a-zA-Z][a-zA-Z0-9+.-]*://(?:[^']|'')*)'`)
	// Options whose values are secrets, as they may appear in a job description.
	secretOptRe = regexp.MustCompile(`(?i)\b(webhook_auth_header|webhook_client_key|sasl_password)(\s*=\s*)'(?:[^']|'')*'`)
)

// RedactStatement hides secrets in a CREATE CHANGEFEED statement or job description:
// the auth header value and URI credentials/certificates. CockroachDB already redacts
// some of these in job descriptions; this does not rely on it.
func RedactStatement(s string) string {
	s = secretOptRe.ReplaceAllString(s, "${1}${2}'"+Redacted+"'")
	return quotedURIRe.ReplaceAllStringFunc(s, func(m string) string {
		inner := strings.ReplaceAll(m[1:len(m)-1], "''", "'")
		return quote(RedactSinkURI(inner))
	})
}

// sinkIdentity is what makes two feeds "the same sink": host and path, whatever the
// TLS parameters or auth header. "" when raw is not a webhook URI.
func sinkIdentity(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != SchemeWebhookHTTPS && scheme != "webhook-http" {
		return ""
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	return strings.ToLower(u.Host) + path
}
