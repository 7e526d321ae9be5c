package cpython

import (
	"fmt"
	"regexp"
	"strconv"
)

// Release is a CPython minor release: 3.N.
type Release struct{ Major, Minor int }

func (r Release) String() string { return fmt.Sprintf("%d.%d", r.Major, r.Minor) }

// Known releases: the first and the last whose layout is known.
var (
	FirstRelease = Release{3, 10}
	LastRelease  = Release{3, 13}
)

// Known says whether the package knows r's layout.
func (r Release) Known() bool {
	return r.Major == 3 && r.Minor >= FirstRelease.Minor && r.Minor <= LastRelease.Minor
}

// Version is a PY_VERSION_HEX: 0x030b07f0 is 3.11.7 final.
type Version uint32

func (v Version) Release() Release { return Release{int(v >> 24), int(v >> 16 & 0xff)} }
func (v Version) Micro() int       { return int(v >> 8 & 0xff) }

func (v Version) String() string {
	s := fmt.Sprintf("%d.%d.%d", v>>24, v>>16&0xff, v>>8&0xff)
	switch level, serial := v>>4&0xf, v&0xf; level {
	case 0xa, 0xb, 0xc:
		s += fmt.Sprintf("%c%d", "abc"[level-0xa], serial)
	case 0xf:
	default:
		s += fmt.Sprintf("?%x%d", level, serial)
	}
	return s
}

// interpreterFile matches the files that hold a CPython interpreter: the
// executable (python3.11, linked statically with it) or its shared
// library (libpython3.11.so.1.0), with the release in the name.
var interpreterFile = regexp.MustCompile(`^(?:lib)?python(\d+)\.(\d+)(?:\.so(?:\.[0-9.]+)?)?$`)

// releaseOfFile is the release a file's base name says it holds.
func releaseOfFile(base string) (Release, bool) {
	m := interpreterFile.FindStringSubmatch(base)
	if m == nil {
		return Release{}, false
	}
	major, err1 := strconv.Atoi(m[1])
	minor, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || major > 9 || minor > 99 {
		return Release{}, false
	}
	return Release{major, minor}, true
}
