package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every bad invocation ends with a non-zero code and one line saying why,
// before anything needs root.
func TestBadInvocations(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage:"},
		{[]string{"frobnicate"}, 1, `unknown command "frobnicate"`},
		{[]string{"attach"}, 1, "attach needs --pid PID"},
		{[]string{"attach", "--pid", "abc"}, 1, `not a pid: "abc"`},
		{[]string{"attach", "--pid", "1", "extra"}, 1, `unexpected argument "extra"`},
		{[]string{"attach", "--pid", "1073741824"}, 1, "no such process: 1073741824"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("reqprof %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if last := lines[len(lines)-1]; tc.code == 1 && !strings.HasPrefix(last, "reqprof: ") {
			t.Errorf("reqprof %q: last line %q is not a reqprof error line", tc.args, last)
		}
	}
}

func TestPidFlagTakesLabels(t *testing.T) {
	var p pidFlags
	for _, v := range []string{"111=rust-sdk", "222"} {
		if err := p.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if len(p) != 2 || p[0].PID != 111 || p[0].Label != "rust-sdk" || p[1].PID != 222 || p[1].Label != "" {
		t.Errorf("parsed %+v", p)
	}
}
