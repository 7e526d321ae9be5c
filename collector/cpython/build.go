package cpython

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// buildLayout gives release's layout from the sources there are, each
// field from the first that has it: debug (3.13's _Py_DebugOffsets, nil
// when none), dwarf (nil when none), the table. A field of the release
// that none of them has is an error naming it.
func buildLayout(release Release, debug *debugOffsets, dwarf *dwarfIndex) (*Layout, error) {
	if !release.Known() {
		return nil, fmt.Errorf("Python %s's layout is not known (only %s to %s)", release, FirstRelease, LastRelease)
	}
	table := tables[release.Minor]
	l := &Layout{Release: release}
	var missing []string
	for _, spec := range fieldSpecs {
		query, ok := spec.dwarf[release.Minor]
		switch {
		case !ok:
			l.set(spec.name, Absent, SourceNone)
		case debug != nil && spec.debug != nil:
			l.set(spec.name, spec.debug(debug), SourceDebugOffsets)
		case dwarf != nil:
			v, err := dwarf.resolve(query)
			if err != nil {
				return nil, fmt.Errorf("Python %s's debug information: %w", release, err)
			}
			l.set(spec.name, v, SourceDWARF)
		default:
			v, ok := table[spec.name]
			if !ok {
				missing = append(missing, spec.name)
				continue
			}
			l.set(spec.name, v, SourceTable)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("Python %s: no offset known for %v", release, missing)
	}
	return l, nil
}

// debugInfo indexes the DWARF of the ELF file at path (in pid's mount
// namespace, from root), or of its separate debug file: by build id, then
// by .gnu_debuglink, under /usr/lib/debug in the process's file system
// then in ours. nil, nil when there is none.
func debugInfo(root, path string) (*dwarfIndex, error) {
	f, err := elf.Open(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Section(".debug_info") != nil {
		return indexDWARF(f)
	}
	var candidates []string
	if id := buildID(f); len(id) > 2 {
		candidates = append(candidates, filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug"))
	}
	if s := f.Section(".gnu_debuglink"); s != nil && s.Size < 4096 {
		if data, err := s.Data(); err == nil {
			if name, _, _ := cutNUL(data); name != "" && filepath.Base(name) == name {
				candidates = append(candidates, filepath.Join("/usr/lib/debug", filepath.Dir(path), name))
			}
		}
	}
	for _, r := range []string{root, "/"} {
		for _, c := range candidates {
			df, err := elf.Open(filepath.Join(r, c))
			if err != nil {
				continue
			}
			ix, err := indexDWARF(df)
			df.Close()
			if err == nil && ix != nil {
				return ix, nil
			}
		}
	}
	return nil, nil
}

func cutNUL(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return string(b), nil, false
}

// indexDWARF indexes f's DWARF; nil, nil when it has none. A malformed
// one is an error, never a panic.
func indexDWARF(f *elf.File) (ix *dwarfIndex, err error) {
	defer func() {
		if recover() != nil {
			ix, err = nil, errors.New("malformed debug information")
		}
	}()
	if f.Section(".debug_info") == nil {
		return nil, nil
	}
	data, err := f.DWARF()
	if err != nil {
		return nil, err
	}
	return newDWARFIndex(data)
}

// staticLayouts are the layouts built, by file identity and the
// _Py_DebugOffsets read from the process (the same for every process of
// a file: they are static data): indexing a libpython's DWARF takes a
// fraction of a second, and a host runs many processes of one binary.
var staticLayouts struct {
	sync.Mutex
	byKey map[layoutKey]staticLayout
}

type layoutKey struct {
	file  fileIdentity
	debug debugOffsets
}

type staticLayout struct {
	layout *Layout
	err    error
}

// fileIdentity tells files apart: the same device and inode, size and
// modification time is the same file.
type fileIdentity struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

func identify(path string) (fileIdentity, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return fileIdentity{}, false
	}
	id := fileIdentity{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := statIDs(st); ok {
		id.dev, id.ino = sys.dev, sys.ino
	}
	return id, true
}
