package profile

import "testing"

// Causes name themselves as the collector has always named them, in tables
// and JSON alike, and read back from those names.
func TestCauseNames(t *testing.T) {
	for _, c := range []struct {
		cause Cause
		name  string
	}{
		{Cause{Kind: CauseSyscall, Name: "write"}, "syscall:write"},
		{Cause{Kind: CauseSyscall, Name: "(entered before attach)"}, "syscall:(entered before attach)"},
		{Cause{Kind: CauseSyscall, Name: "nr5000"}, "syscall:nr5000"},
		{Cause{Kind: CauseSyscall, Name: "other"}, "syscall:other"},
		{Cause{Kind: CauseSoftirq, Name: "NET_RX"}, "softirq:NET_RX"},
		{Cause{Kind: CauseIRQ}, "irq"},
		{Cause{Name: "hrtimer"}, "hrtimer"},
		{Cause{Name: "page_fault:user"}, "page_fault:user"},
	} {
		if got := c.cause.String(); got != c.name {
			t.Errorf("%#v is named %q, want %q", c.cause, got, c.name)
		}
		if got := ParseCause(c.name); got != c.cause {
			t.Errorf("%q reads as %#v, want %#v", c.name, got, c.cause)
		}
	}
}

// The kind is what comes before the first colon, as reports have always
// grouped causes: a name whose kind is known keeps it even when the rest
// is unusual.
func TestParseCauseKind(t *testing.T) {
	for name, want := range map[string]Cause{
		"syscall":         {Kind: CauseSyscall},
		"syscall:a:b":     {Kind: CauseSyscall, Name: "a:b"},
		"irq:9":           {Kind: CauseIRQ, Name: "9"},
		"Syscall:write":   {Name: "Syscall:write"},
		"":                {},
		":write":          {Name: ":write"},
		"softirqs:NET_RX": {Name: "softirqs:NET_RX"},
	} {
		if got := ParseCause(name); got != want {
			t.Errorf("%q reads as %#v, want %#v", name, got, want)
		}
	}
}

func TestCauseKindString(t *testing.T) {
	for kind, want := range map[CauseKind]string{
		CauseUnknown: "", CauseSyscall: "syscall", CauseSoftirq: "softirq", CauseIRQ: "irq", CauseIRQ + 1: "CauseKind(4)",
	} {
		if got := kind.String(); got != want {
			t.Errorf("kind %d is %q, want %q", kind, got, want)
		}
	}
}
