// Package docs holds reqprof's pages; its test keeps LAYOUT.md, the map
// of the code, true to the tree.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// backticked finds `quoted` names.
var backticked = regexp.MustCompile("`([^`]+)`")

// rowPath finds the first quoted name of a table row's first cell.
var rowPath = regexp.MustCompile("^\\| `([^`]+)`")

// TestLayoutNamesEverything fails when LAYOUT.md leaves out a file of bpf/
// or a Go package of the module, or when a row of its tables names a path
// that is not there.
func TestLayoutNamesEverything(t *testing.T) {
	text, err := os.ReadFile("LAYOUT.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range backticked.FindAllStringSubmatch(string(text), -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}

	files, err := os.ReadDir("../bpf")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !named[f.Name()] && !named["bpf/"+f.Name()] {
			t.Errorf("docs/LAYOUT.md does not name bpf/%s", f.Name())
		}
	}

	packages, err := goPackages("..")
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) < 10 {
		t.Fatalf("found %d Go packages (%v): not the module's tree", len(packages), packages)
	}
	for _, p := range packages {
		if !named[p] {
			t.Errorf("docs/LAYOUT.md does not name the package %s", p)
		}
	}

	// Each table row's path is there: under bpf/ in the table of bpf/,
	// else from the module's root.
	base := ".."
	for line := range strings.Lines(string(text)) {
		if strings.HasPrefix(line, "## ") {
			base = ".."
			if strings.TrimSpace(line) == "## bpf/" {
				base = "../bpf"
			}
			continue
		}
		m := rowPath.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(base, m[1])); err != nil {
			t.Errorf("docs/LAYOUT.md's row of %s names nothing there: %v", m[1], err)
		}
	}
}

// goPackages lists the directories below root that hold Go files, as
// paths from root, leaving out what the go command leaves out: testdata,
// and directories whose names start with a dot or an underscore.
func goPackages(root string) ([]string, error) {
	seen := map[string]bool{}
	var packages []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if dir = filepath.ToSlash(dir); !seen[dir] {
			seen[dir] = true
			packages = append(packages, dir)
		}
		return nil
	})
	return packages, err
}
