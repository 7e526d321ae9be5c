package cpython

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// tableCase is a code object's line table and the lines CPython gives
// its instructions (testdata/linetables.py's line).
type tableCase struct {
	Name        string   `json:"name"`
	FirstLineno int      `json:"firstlineno"`
	Linetable   string   `json:"linetable"`
	CodeLen     int      `json:"codelen"`
	Ranges      [][3]int `json:"ranges"`
}

// decoderOf is the line table decoder of release 3.N.
func decoderOf(minor int) func([]byte, int, int) int {
	if minor == 10 {
		return lineOf310
	}
	return lineOf311
}

// checkTables decodes each code object's table of r at every
// instruction, and before the first, and compares with CPython's lines.
// It returns how many code objects it checked.
func checkTables(t *testing.T, minor int, r io.Reader) int {
	t.Helper()
	decode := decoderOf(minor)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	n := 0
	for sc.Scan() {
		var c tableCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		table, err := hex.DecodeString(c.Linetable)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int, c.CodeLen/codeUnitSize)
		for i := range want {
			want[i] = -1
		}
		for _, r := range c.Ranges {
			for off := r[0]; off < r[1] && off/codeUnitSize < len(want); off += codeUnitSize {
				want[off/codeUnitSize] = r[2]
			}
		}
		bad := 0
		for i, line := range want {
			if got := decode(table, c.FirstLineno, i*codeUnitSize); got != line {
				if bad++; bad <= 3 {
					t.Errorf("3.%d %s: offset %d: line %d, CPython says %d", minor, c.Name, i*codeUnitSize, got, line)
				}
			}
		}
		if got := decode(table, c.FirstLineno, -codeUnitSize); got != c.FirstLineno {
			t.Errorf("3.%d %s: before its first instruction: line %d, want its first line %d", minor, c.Name, got, c.FirstLineno)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// The decoders give, for every instruction of code objects compiled by
// each release (saved in testdata/linetables: code made to stress the
// tables, and json.decoder's), the line CPython's co_lines() gives.
func TestLineTablesFixtures(t *testing.T) {
	for minor := FirstRelease.Minor; minor <= LastRelease.Minor; minor++ {
		b, err := os.ReadFile(fmt.Sprintf("testdata/linetables/3.%d.jsonl", minor))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"long_gaps", "long_line", "going_back", "cleanup", "far_down", "JSONDecoder"} {
			if !bytes.Contains(b, []byte(`"`+name)) {
				t.Errorf("3.%d: no %s in the fixture", minor, name)
			}
		}
		if n := checkTables(t, minor, bytes.NewReader(b)); n < 20 {
			t.Errorf("3.%d: %d code objects", minor, n)
		}
	}
}

// The same, on every code object of a few large modules, compiled by
// each interpreter of this machine.
func TestLineTablesLive(t *testing.T) {
	for _, in := range interpreters {
		t.Run(in.name, func(t *testing.T) {
			requireFile(t, in.path)
			cmd := exec.Command(in.path, "testdata/linetables.py", "cases", "asyncio.base_events", "asyncio.tasks", "inspect", "typing", "dataclasses")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			n := checkTables(t, in.release.Minor, bytes.NewReader(out))
			t.Logf("%d code objects", n)
			if n < 500 {
				t.Errorf("only %d code objects", n)
			}
		})
	}
}
