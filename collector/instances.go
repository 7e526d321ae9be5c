package collector

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// kernelNames are the names the kernel reports for the reqprof BPF objects
// other programs look for, taken from the compiled-in collection spec so
// that they follow the BPF sources.
type kernelNames struct {
	schedSwitch string // the program every reqprof instance attaches once
	conns       string // the map of tracked connections
}

// loadKernelNames reads the names from the embedded spec once.
var loadKernelNames = sync.OnceValues(func() (kernelNames, error) {
	spec, err := embeddedSpec()
	if err != nil {
		return kernelNames{}, err
	}
	var specs reqprofSpecs
	if err := spec.Copy().Assign(&specs); err != nil {
		return kernelNames{}, fmt.Errorf("reading reqprof's BPF spec: %w", err)
	}
	return kernelNames{
		schedSwitch: kernelObjName(specs.OnSchedSwitch.Name),
		conns:       kernelObjName(specs.Conns.Name),
	}, nil
})

// kernelObjName is name as the kernel keeps it: at most BPF_OBJ_NAME_LEN-1
// bytes.
func kernelObjName(name string) string {
	if len(name) > unix.BPF_OBJ_NAME_LEN-1 {
		return name[:unix.BPF_OBJ_NAME_LEN-1]
	}
	return name
}

// LoadedInstances counts the reqprof instances loaded on the machine, in
// this process or any other (reqprof runs, reqprof tests): each loads its
// sched_switch program once, so it counts the loaded programs of that name.
func LoadedInstances() (int, error) {
	names, err := loadKernelNames()
	if err != nil {
		return 0, err
	}
	n := 0
	id := ebpf.ProgramID(0)
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded since
		}
		info, err := p.Info()
		p.Close()
		// The library may give the full name from BTF where the kernel's
		// was cut short.
		if err == nil && kernelObjName(info.Name) == names.schedSwitch {
			n++
		}
	}
}

// ConnsMapName is the name the kernel reports (ebpf.MapInfo.Name) for
// reqprof's map of tracked connections, for tools that find reqprof's maps
// through a process's descriptors.
func ConnsMapName() (string, error) {
	names, err := loadKernelNames()
	return names.conns, err
}
