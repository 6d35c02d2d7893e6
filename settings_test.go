package inboxd

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEverySettingReachesAComponent: a setting changed from its default changes the
// Config of some component (components, built by copySettings and by hand), so that a field
// added to Config and to a component's Config under names that do not match, or of
// types copySettings cannot copy, fails here rather than being silently ignored. The fields in
// byRun are read by Run itself, or by parts that components does not build.
func TestEverySettingReachesAComponent(t *testing.T) {
	t.Parallel()
	byRun := map[string]string{
		"Logger": "each part's logger", "MetricsRegisterer": "New", "TracerProvider": "ingest and process; not probed",
		"StompTLS": "New (stompTLS)", "StompCAFile": "New", "StompServerName": "New", "StompCertFile": "New",
		"StompKeyFile": "New", "StompTLSInsecureSkip": "New, and a warning",
		"PublishDestination": "the API", "HTTPAddr": "the API", "DisableHTTP": "run", "AdminToken": "the API", "ReadToken": "the API",
		"WebhookAddr": "newWebhook", "DisableWebhook": "run", "WebhookToken": "newWebhook", "CertDir": "newWebhook",
		"CertFile": "newWebhook", "KeyFile": "newWebhook", "CertHosts": "newWebhook",
		"Retention": "the pruner, migrate", "QuarantineRetention": "the pruner, migrate",
		"ShutdownTimeout": "lifecycle", "StallAfter": "health", "MigrateAtStart": "schema",
	}
	// Probes for the settings whose value must parse.
	probes := map[string]any{"IDSource": "header:probe"}
	build := func(c Config) components {
		t.Helper()
		p, err := c.components(c.stomp(nil, slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := Config{}.WithDefaults()
	want := build(base)
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if _, ok := byRun[name]; ok {
			continue
		}
		c := base
		f := reflect.ValueOf(&c).Elem().Field(i)
		switch p, ok := probes[name]; {
		case ok:
			f.Set(reflect.ValueOf(p))
		case f.Type() == reflect.TypeFor[time.Duration]():
			f.SetInt(f.Int() + int64(7*time.Second))
		case f.Kind() == reflect.Int:
			f.SetInt(f.Int() + 7)
		case f.Kind() == reflect.String:
			f.SetString(f.String() + "probe")
		case f.Kind() == reflect.Bool:
			f.SetBool(!f.Bool())
		case f.Type() == reflect.TypeFor[[]string]():
			f.Set(reflect.ValueOf([]string{"/queue/probe"}))
		default:
			t.Fatalf("Config.%s: no probe for a %s", name, f.Type())
		}
		if reflect.DeepEqual(build(c), want) {
			t.Errorf("Config.%s reaches no component: name the component's field the same, or the same less its prefix "+
				"(copySettings), or set it by hand in components; a setting Run reads itself belongs in byRun", name)
		}
	}
}

// TestCopySettingsRefusesAnotherType: a component field whose namesake in Config has another
// type is a bug copySettings reports, unless it is set by hand.
func TestCopySettingsRefusesAnotherType(t *testing.T) {
	t.Parallel()
	var dst struct {
		BatchSize    string // Config.BatchSize is an int
		Lease        time.Duration
		Destinations []string
	}
	c := Config{BatchSize: 3, OutboxLease: time.Minute, Destinations: []string{"/queue/a"}}
	copySettings(&dst, c, "Outbox", "BatchSize")
	if dst.Lease != time.Minute || len(dst.Destinations) != 1 || dst.BatchSize != "" {
		t.Errorf("copySettings gave %+v", dst)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "BatchSize") {
			t.Errorf("copySettings of a field of another type: recovered %v, want a panic naming it", r)
		}
	}()
	copySettings(&dst, c, "Outbox")
}
