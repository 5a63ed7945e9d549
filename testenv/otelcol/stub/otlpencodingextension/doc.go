// Package otlpencodingextension is an empty stand-in: only fileexporter's
// tests import the real one, and the module proxy does not serve it, but
// `go mod tidy` resolves test imports too. Nothing here is compiled into
// the collector.
package otlpencodingextension
