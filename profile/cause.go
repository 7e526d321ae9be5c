package profile

import (
	"strconv"
	"strings"
)

// CauseKind is the kind of kernel work a request's kernel time went to.
type CauseKind uint8

const (
	// CauseUnknown is a cause of no kind reqprof knows: one read back from
	// a summary whose name has no kind's prefix. Its Name is all of it.
	CauseUnknown CauseKind = iota
	// CauseSyscall is a syscall the request's thread made, named by the
	// syscall ("write"), or "nrN" for a number with no name,
	// "(entered before attach)" for one made before the window opened,
	// "other" for those past what a request record has room for.
	CauseSyscall
	// CauseSoftirq is a softirq that ran over the request's thread, named
	// by its vector ("NET_RX", "TIMER").
	CauseSoftirq
	// CauseIRQ is the hard interrupt handlers that ran over the request's
	// thread, all of them as one cause of no name.
	CauseIRQ
)

// String is the kind as a cause's name starts with it: "syscall",
// "softirq", "irq"; "" for CauseUnknown.
func (k CauseKind) String() string {
	switch k {
	case CauseUnknown:
		return ""
	case CauseSyscall:
		return "syscall"
	case CauseSoftirq:
		return "softirq"
	case CauseIRQ:
		return "irq"
	}
	return "CauseKind(" + strconv.Itoa(int(k)) + ")"
}

// Cause is what some kernel time was spent on: a kind of kernel work and,
// within it, which one. It is comparable, to key a breakdown by.
type Cause struct {
	Kind CauseKind
	Name string
}

// String is the cause's name as tables and JSON summaries show it: the
// kind, a colon and the name ("syscall:write", "softirq:NET_RX"), the kind
// alone when there is no name ("irq"), the name alone for CauseUnknown.
func (c Cause) String() string {
	switch {
	case c.Kind == CauseUnknown:
		return c.Name
	case c.Name == "":
		return c.Kind.String()
	}
	return c.Kind.String() + ":" + c.Name
}

// ParseCause reads a cause back from its name, as String gives it, for
// causes read from a JSON summary: the kind from what comes before the
// first colon (or from all of it when there is none), the name from what
// comes after. A name with no known kind's prefix is a CauseUnknown.
// ParseCause(c.String()) is c for every cause the collector gives.
func ParseCause(s string) Cause {
	prefix, name, _ := strings.Cut(s, ":")
	for _, kind := range [...]CauseKind{CauseSyscall, CauseSoftirq, CauseIRQ} {
		if prefix == kind.String() {
			return Cause{Kind: kind, Name: name}
		}
	}
	return Cause{Name: s}
}
