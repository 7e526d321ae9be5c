package cpython

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
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
	r, err := os.Open(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ix, f, err := dwarfOfELF(r)
	if err != nil || ix != nil {
		return ix, err
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
	for _, dir := range []string{root, "/"} {
		for _, c := range candidates {
			df, err := os.Open(filepath.Join(dir, c))
			if err != nil {
				continue
			}
			ix, _, err := dwarfOfELF(df)
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

// dwarfOfELF indexes the DWARF of the ELF file r, and gives the file
// (nil when it is none): nil, f, nil when it has no DWARF. The file is
// the target's: malformed, it gives an error, never a panic.
func dwarfOfELF(r io.ReaderAt) (ix *dwarfIndex, f *elf.File, err error) {
	defer func() {
		if recover() != nil {
			ix, f, err = nil, nil, errors.New("malformed ELF file or debug information")
		}
	}()
	if f, err = elf.NewFile(r); err != nil {
		return nil, nil, err
	}
	ix, err = indexDWARF(f)
	return ix, f, err
}

// indexDWARF indexes f's DWARF; nil, nil when it has none.
func indexDWARF(f *elf.File) (ix *dwarfIndex, err error) {
	defer func() {
		if recover() != nil {
			ix, err = nil, errors.New("malformed debug information")
		}
	}()
	info := f.Section(".debug_info")
	if info == nil {
		return nil, nil
	}
	data, err := f.DWARF()
	if err != nil {
		return nil, err
	}
	return newDWARFIndex(data, info.Size)
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
