package api

import "context"

type extensionsKey struct{}

// WithExtensions returns ctx carrying API extensions for a Client's Run: how the command
// line adds the demo's routes without a public field of an internal type.
func WithExtensions(ctx context.Context, x ...Extension) context.Context {
	return context.WithValue(ctx, extensionsKey{}, append(ExtensionsFrom(ctx), x...))
}

// ExtensionsFrom is the extensions ctx carries, if any.
func ExtensionsFrom(ctx context.Context) []Extension {
	x, _ := ctx.Value(extensionsKey{}).([]Extension)
	return x[:len(x):len(x)]
}
