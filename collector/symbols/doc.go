// Package symbols turns the addresses of sampled stacks into functions:
// a process's from its mappings (/proc/PID/maps) and the files they map,
// Go binaries by their pclntab (which stripping keeps), other ELF binaries
// and shared libraries by their .symtab and .dynsym or a separate debug
// file (found by build id or .gnu_debuglink), JIT code by the process's
// perf map (/tmp/perf-PID.map), and the kernel's by /proc/kallsyms.
//
// It reads files and /proc only, loads no BPF and needs no root for a
// process of the same user, so it is tested without root. Everything it
// reads comes from outside (binaries, maps, perf maps): a malformed input
// leaves addresses unresolved, with a note, and never stops a run.
package symbols
