// Package report turns what the collector measured, the values of package
// profile, into distributions, tables, pages and JSON. It knows nothing of
// BPF: every input is a plain Go value, so all of it is testable without
// root.
package report
