// Package cpython reads a CPython interpreter's state from outside its
// process: which interpreter a process runs and where, the layout of its
// structures, its threads, each thread's Python frames and running
// context, and the names and lines those frames stand for.
//
// CPython makes no promise about its structures between minor releases.
// The layout is taken, field by field, from the first of these that has
// it:
//
//   - the interpreter itself: 3.13 publishes the offsets of its main
//     structures in _Py_DebugOffsets, at the start of _PyRuntime;
//   - the DWARF debug information of the binary, or of its separate debug
//     file (found by build id): pyenv builds with -g;
//   - a table per release for builds with neither (Debian's python3.11),
//     each entry checked in a test against the DWARF of a build of that
//     release.
//
// A layout is checked against the live process before it is used, and
// every object read is checked by type (a code object's type is
// PyCode_Type, a name's is PyUnicode_Type): an interpreter whose release
// or build is not known gives an error naming what could not be read,
// never a wrong layout.
//
// Releases 3.10 to 3.13 are known, on x86-64 (little-endian, 8-byte
// pointers), with the GIL (not the free-threaded build). The package
// knows no BPF: the collector hands the Layout's offsets to its programs.
package cpython
