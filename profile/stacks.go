package profile

import (
	"path"
	"strconv"
)

// Stacks are a target's on-CPU stack samples: where its threads were when
// each CPU's sampling clock ticked, each sample with the request it ran
// for (its route), resolved to functions.
type Stacks struct {
	// Hz is how often each CPU was sampled; each sample stands for
	// PeriodNs of CPU time.
	Hz       int
	PeriodNs uint64
	// Frames are every distinct frame of the samples, which refer to them
	// by index.
	Frames []Frame
	// Samples are counted by route, mode and stack: one entry for each
	// distinct (route, mode, frames).
	Samples []StackSample
	// Notes say where frames are only addresses, and why: a binary without
	// symbols, no perf map for JIT code, hidden kernel symbols, a process
	// gone before its stacks were read.
	Notes []string
	// Lost counts samples taken but not kept, by why: "ring_buffer" (the
	// collector read too slowly), "pending_bound" (past the bound on
	// samples held for requests not yet finished), "stack_bound" (past the
	// bound on distinct stacks).
	Lost map[string]uint64
}

// StackSample is how many samples ran one stack for one route, in one mode.
type StackSample struct {
	// Route is the request's route and port; BetweenRequests or
	// UnfinishedRequest for samples that ran for no finished request.
	Route RouteKey
	// Kernel says the sample was taken in the kernel: its kernel frames
	// lead, its user frames are where the thread entered the kernel.
	Kernel bool
	// Frames index Stacks.Frames, innermost (the sampled function) first.
	Frames []int32
	Count  uint64
}

// Routes of samples that ran for no finished request.
const (
	// BetweenRequests: the thread served no request (a runtime's own
	// threads, an event loop waiting, the CPU reqprof counts as
	// unattributed).
	BetweenRequests = "(between requests)"
	// UnfinishedRequest: the request it ran for had not finished when the
	// window closed, began before it, or its record was lost.
	UnfinishedRequest = "(request not finished)"
)

// Frame is one resolved address of a stack.
type Frame struct {
	// Function is the function's name, "" when no symbol covers the
	// address.
	Function string
	// File and Line are the source position, where the binary says (Go's
	// pclntab) or the interpreter (a Python or PHP frame); "" and 0
	// otherwise.
	File string
	Line int
	// FunctionLine is the line an interpreted function begins at (a
	// Python code object's first line, a PHP function's line_start), which
	// names it with its file; 0 for native code.
	FunctionLine int
	// Module is the binary or library that holds the address (its path in
	// the target's file system), "[kernel]" or "[MODULE]" for the kernel
	// and its modules, "[jit]" for code in anonymous executable memory (a
	// JIT's, named if its perf map names it), "[python]" or "[php]" for a
	// frame of interpreted code, "" when no mapping holds it.
	Module  string
	BuildID string
	// Address is the sampled address in the process (or the kernel).
	Address uint64
	// ModuleAddress is Address as the module's own file numbers it (the
	// ELF virtual address addr2line and objdump take); 0 when unknown.
	ModuleAddress uint64
	// MappingStart, MappingLimit and MappingOffset are the mapping that
	// held Address and its offset in Module's file, for pprof; 0 when none.
	MappingStart, MappingLimit, MappingOffset uint64
	Kernel                                    bool
}

// KernelModule is the Module of frames in the kernel's own text.
const KernelModule = "[kernel]"

// JITModule is the Module of frames in anonymous executable memory: code
// a JIT compiled, which a perf map (/tmp/perf-PID.map) may name.
const JITModule = "[jit]"

// Modules of interpreted frames: a function of the interpreted code, whose
// Address is its code object (Python) or zend_function (PHP).
const (
	PythonModule = "[python]"
	PHPModule    = "[php]"
)

// Interpreted says the frame is a function of interpreted code (Python,
// PHP), not of native code.
func (f Frame) Interpreted() bool { return f.Module == PythonModule || f.Module == PHPModule }

// Name is what a profile shows for the frame: its function; for an
// interpreted function, with its file and the line it begins at
// ("light_work (app.py:12)", one name however many of its lines the
// samples are at); or where the address is when no symbol covers it
// ("libfoo.so+0x1a2b", "0x7f3a...").
func (f Frame) Name() string {
	if f.Function != "" && f.Interpreted() && f.File != "" {
		return f.Function + " (" + path.Base(f.File) + ":" + strconv.Itoa(f.FunctionLine) + ")"
	}
	if f.Function != "" {
		return f.Function
	}
	if f.Module != "" {
		addr := f.ModuleAddress
		if addr == 0 {
			addr = f.Address
		}
		return path.Base(f.Module) + "+0x" + strconv.FormatUint(addr, 16)
	}
	return "0x" + strconv.FormatUint(f.Address, 16)
}
