package cpython

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
)

// debugOffsets is 3.13's _Py_DebugOffsets (Include/internal/
// pycore_runtime.h), the first member of _PyRuntime: the offsets of the
// main structures' members, for debuggers and profilers outside the
// process. Its layout is stable within a minor release only, so it is
// parsed by the release its version gives. Each section starts with the
// size of the structure it describes.
type debugOffsets struct {
	Cookie       [8]byte
	Version      uint64
	FreeThreaded uint64
	RuntimeState struct {
		Size, Finalizing, InterpretersHead uint64
	}
	InterpreterState struct {
		Size, ID, Next, ThreadsHead, GC, ImportsModules, Sysdict, Builtins, CevalGIL,
		GILRuntimeState, GILRuntimeStateEnabled, GILRuntimeStateLocked, GILRuntimeStateHolder uint64
	}
	ThreadState struct {
		Size, Prev, Next, Interp, CurrentFrame, ThreadID, NativeThreadID, DatastackChunk, Status uint64
	}
	InterpreterFrame struct {
		Size, Previous, Executable, InstrPtr, Localsplus, Owner uint64
	}
	CodeObject struct {
		Size, Filename, Name, Qualname, Linetable, Firstlineno, Argcount, Localsplusnames,
		Localspluskinds, CoCodeAdaptive uint64
	}
	PyObject struct {
		Size, ObType uint64
	}
	TypeObject struct {
		Size, TpName, TpRepr, TpFlags uint64
	}
	TupleObject struct {
		Size, ObItem, ObSize uint64
	}
	ListObject struct {
		Size, ObItem, ObSize uint64
	}
	DictObject struct {
		Size, MaKeys, MaValues uint64
	}
	FloatObject struct {
		Size, ObFval uint64
	}
	LongObject struct {
		Size, LvTag, ObDigit uint64
	}
	BytesObject struct {
		Size, ObSize, ObSval uint64
	}
	UnicodeObject struct {
		Size, State, Length, ASCIIObjectSize uint64
	}
	GC struct {
		Size, Collecting uint64
	}
}

// debugOffsetsSize is the size of 3.13's _Py_DebugOffsets: 584 bytes.
var debugOffsetsSize = binary.Size(debugOffsets{})

// debugCookie starts _Py_DebugOffsets.
const debugCookie = "xdebugpy"

// errNoDebugOffsets says _PyRuntime does not start with _Py_DebugOffsets
// (a release before 3.13).
var errNoDebugOffsets = errors.New("no _Py_DebugOffsets")

// parseDebugOffsets parses the _Py_DebugOffsets at the start of b (the
// start of _PyRuntime), for release: errNoDebugOffsets when b does not
// start with its cookie. Its version must be release's, the build must
// have the GIL, and every offset must lie within the size its section
// gives.
func parseDebugOffsets(b []byte, release Release) (*debugOffsets, error) {
	if !bytes.HasPrefix(b, []byte(debugCookie)) {
		return nil, errNoDebugOffsets
	}
	if release != (Release{3, 13}) {
		return nil, fmt.Errorf("_Py_DebugOffsets of Python %s: only 3.13's is known", release)
	}
	if len(b) < debugOffsetsSize {
		return nil, fmt.Errorf("_Py_DebugOffsets: %d bytes, want %d", len(b), debugOffsetsSize)
	}
	d := &debugOffsets{}
	if _, err := binary.Decode(b, binary.LittleEndian, d); err != nil {
		return nil, err
	}
	if got := Version(d.Version).Release(); got != release || d.Version>>32 != 0 {
		return nil, fmt.Errorf("_Py_DebugOffsets says version %#x, not %s's", d.Version, release)
	}
	if d.FreeThreaded != 0 {
		return nil, errors.New("a free-threaded build (no GIL): its objects' layout is not known")
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("_Py_DebugOffsets: %w", err)
	}
	return d, nil
}

// check says whether every section's offsets lie within the size it
// gives, and its size is a plausible structure's.
func (d *debugOffsets) check() error {
	v := reflect.ValueOf(d).Elem()
	for i := 3; i < v.NumField(); i++ {
		section := v.Field(i)
		name := v.Type().Field(i).Name
		size := section.Field(0).Uint()
		// _PyRuntimeState holds the main interpreter: some 300 kB.
		if size == 0 || size > 1<<20 {
			return fmt.Errorf("%s: size %d", name, size)
		}
		for j := 1; j < section.NumField(); j++ {
			field := section.Type().Field(j).Name
			off := section.Field(j).Uint()
			if name == "UnicodeObject" && field == "ASCIIObjectSize" {
				if off == 0 || off > size {
					return fmt.Errorf("%s.%s: %d, beyond its size %d", name, field, off, size)
				}
				continue
			}
			if name == "InterpreterState" && field == "GILRuntimeStateEnabled" {
				continue // 0 with the GIL
			}
			if off >= size {
				return fmt.Errorf("%s.%s: %d, beyond its size %d", name, field, off, size)
			}
		}
	}
	is := d.InterpreterState
	if is.GILRuntimeStateLocked < is.GILRuntimeState || is.GILRuntimeStateHolder < is.GILRuntimeState {
		return errors.New("InterpreterState: the GIL's members lie before it")
	}
	return nil
}
