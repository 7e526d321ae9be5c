package main

import (
	"errors"
	"io/fs"
	"os"

	"github.com/reqprof/reqprof/collector"
)

// What attach and demo check before they start anything, each in one line
// a user can act on; tests replace them.
var (
	// privileged says whether this process may load BPF programs.
	privileged = collector.Privileged
	// kernelBTFPath is where the kernel's BTF must be.
	kernelBTFPath = collector.KernelBTFPath
)

// checkHost fails when reqprof could not load its programs here: without
// root or the capabilities that stand for it, or on a kernel without BTF.
// The collector checks more before it loads (tracepoints, map types), but
// these two are the usual ones and deserve their own line.
func checkHost() error {
	ok, err := privileged()
	if err != nil {
		return badInput("reqprof needs root (or CAP_BPF and CAP_PERFMON) to load its programs, and could not read its own capabilities: %v", err)
	}
	if !ok {
		return badInput("reqprof needs root (or CAP_BPF and CAP_PERFMON) to load its programs")
	}
	if _, err := os.Stat(kernelBTFPath); errors.Is(err, fs.ErrNotExist) {
		return badInput("this kernel has no BTF (%s is missing): reqprof needs one built with CONFIG_DEBUG_INFO_BTF=y", kernelBTFPath)
	}
	return nil
}
