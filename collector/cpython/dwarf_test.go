package cpython

import (
	"debug/elf"
	"errors"
	"testing"
)

// fixtureDWARF indexes testdata/dwarf/structs.so: 3.11's structures,
// with only the members read, built with gcc -g.
func fixtureDWARF(t testing.TB) *dwarfIndex {
	t.Helper()
	f, err := elf.Open("testdata/dwarf/structs.so")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ix, err := indexDWARF(f)
	if err != nil || ix == nil {
		t.Fatalf("no debug information: %v", err)
	}
	return ix
}

// The DWARF reader finds 3.11's layout in a small build of its structures
// (whose offsets the C file holds with static assertions): members of
// typedefs of anonymous structs, nested members, bitfields' positions,
// enumeration constants, sizes.
func TestDWARFFixture(t *testing.T) {
	l, err := buildLayout(Release{3, 11}, nil, fixtureDWARF(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range l.Fields() {
		want, ok := tables[11][f.Name]
		if !ok {
			want = Absent
		}
		if f.Value != want {
			t.Errorf("%s: %d, want %d", f.Name, f.Value, want)
		}
		if f.Value != Absent && f.Source != SourceDWARF {
			t.Errorf("%s from %s", f.Name, f.Source)
		}
	}
}

// What the debug information lacks is an error naming it, never a guess.
func TestDWARFMissing(t *testing.T) {
	ix := fixtureDWARF(t)
	for _, query := range []string{"_ts.no_such_member", "no_such_type.a", "enum NO_SUCH", "sizeof no_such_type", "bit PyASCIIObject.state.no_such_bit", "_ts.next.deeper"} {
		if v, err := ix.resolve(query); err == nil {
			t.Errorf("%s: %d, want an error", query, v)
		} else if query != "_ts.next.deeper" && !errors.Is(err, errNoDWARFEntry) {
			t.Errorf("%s: %v, want %v", query, err, errNoDWARFEntry)
		}
	}
	// 3.12 has members 3.11's structures lack.
	if _, err := buildLayout(Release{3, 12}, nil, ix); err == nil {
		t.Error("3.12's layout built from 3.11's structures")
	}
}
