package defaults

import "context"

// commandLineKey marks a context whose Run was started by the command line.
type commandLineKey struct{}

// WithCommandLine marks ctx as the command line's, so that hints name settings as its
// users set them (INBOXD_ADMIN_TOKEN), not as a library caller does (Config.AdminToken).
func WithCommandLine(ctx context.Context) context.Context {
	return context.WithValue(ctx, commandLineKey{}, true)
}

// SettingName names a setting in its caller's terms: env on the command line (a ctx
// from WithCommandLine), else "Config." + field.
func SettingName(ctx context.Context, field, env string) string {
	if cli, _ := ctx.Value(commandLineKey{}).(bool); cli {
		return env
	}
	return "Config." + field
}
