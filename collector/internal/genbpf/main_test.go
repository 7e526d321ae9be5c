package main

import (
	"os"
	"regexp"
	"testing"
)

// Every type the header lists is one it defines, and the list holds the
// records the collector decodes.
func TestMirroredTypes(t *testing.T) {
	const header = "../../../bpf/types.h"
	types, err := mirroredTypes(header)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, name := range types {
		if listed[name] {
			t.Errorf("%s listed twice", name)
		}
		listed[name] = true
		if !regexp.MustCompile(`(?m)^(struct|enum) ` + name + ` \{$`).Match(src) {
			t.Errorf("%s listed but not defined in %s", name, header)
		}
	}
	for _, want := range []string{"request_record", "chunk_record", "stack_sample", "backend_record", "limits", "record_kind"} {
		if !listed[want] {
			t.Errorf("%s not listed", want)
		}
	}
}
