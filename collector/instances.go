package collector

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// kernelNames are the names the kernel reports for the reqprof BPF objects
// other programs look for, taken from the compiled-in collection spec so
// that they follow the BPF sources.
type kernelNames struct {
	schedSwitch string // the program every reqprof instance attaches once
	conns       string // the map of tracked connections
	sampleStack string // the stack sampling program (--stacks)
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
		sampleStack: kernelObjName(specs.SampleStack.Name),
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

// IsStackSamplingProgram says whether name, a program's name as its
// info gives it (ebpf.ProgramInfo.Name: in full where its BTF has it, else
// cut to the kernel's length), is reqprof's stack sampling program's, for
// tools that read its run statistics.
func IsStackSamplingProgram(name string) bool {
	names, err := loadKernelNames()
	return err == nil && kernelObjName(name) == names.sampleStack
}

// HeldObjects are the BPF programs, links and maps a process holds open,
// by the ids the kernel gave them, for tools and tests that check what a
// reqprof leaves behind: reqprof pins nothing, so all it loads is held by
// its file descriptors, and the kernel detaches and frees it when the
// process exits, however it ends.
type HeldObjects struct {
	Programs, Links, Maps []uint32
	// ProgramNames are the names of Programs still loaded when listed,
	// as their info gives them (in full where their BTF has it).
	ProgramNames []string
	// Reqprof says whether one of Programs is reqprof's sched_switch
	// program: the process is a reqprof instance.
	Reqprof bool
}

// Empty says whether h holds nothing.
func (h HeldObjects) Empty() bool {
	return len(h.Programs) == 0 && len(h.Links) == 0 && len(h.Maps) == 0
}

// ObjectsHeldBy lists the BPF objects pid holds through its file
// descriptors, from /proc/PID/fdinfo. A link's program is listed too.
func ObjectsHeldBy(pid int) (HeldObjects, error) {
	names, err := loadKernelNames()
	if err != nil {
		return HeldObjects{}, err
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return HeldObjects{}, err
	}
	progs, links, maps := map[uint32]bool{}, map[uint32]bool{}, map[uint32]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed since
		}
		var keys map[string]map[uint32]bool
		switch target {
		case "anon_inode:bpf-prog":
			keys = map[string]map[uint32]bool{"prog_id": progs}
		case "anon_inode:bpf_link":
			keys = map[string]map[uint32]bool{"link_id": links, "prog_id": progs}
		case "anon_inode:bpf-map":
			keys = map[string]map[uint32]bool{"map_id": maps}
		default:
			continue
		}
		if err := readFdinfoIDs(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()), keys); err != nil && !errors.Is(err, os.ErrNotExist) {
			return HeldObjects{}, err
		}
	}
	h := HeldObjects{Programs: sortedIDs(progs), Links: sortedIDs(links), Maps: sortedIDs(maps)}
	for _, id := range h.Programs {
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			continue
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			continue
		}
		h.ProgramNames = append(h.ProgramNames, info.Name)
		if kernelObjName(info.Name) == names.schedSwitch {
			h.Reqprof = true
		}
	}
	return h, nil
}

// readFdinfoIDs adds the ids of an fdinfo file's lines "KEY:\tID" to
// keys[KEY].
func readFdinfoIDs(path string, keys map[string]map[uint32]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := parseFdinfoIDs(f, keys); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// parseFdinfoIDs is readFdinfoIDs on the file's text.
func parseFdinfoIDs(r io.Reader, keys map[string]map[uint32]bool) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		ids, wanted := keys[key]
		if !ok || !wanted {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(value), 10, 32)
		if err != nil {
			return fmt.Errorf("malformed %s", key)
		}
		ids[uint32(id)] = true
	}
	return sc.Err()
}

func sortedIDs(set map[uint32]bool) []uint32 {
	ids := make([]uint32, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// StillLoaded is those of h the kernel still has. Once nothing holds one
// it is freed, but not at once: the kernel frees programs and maps after
// an RCU grace period.
func (h HeldObjects) StillLoaded() (HeldObjects, error) {
	var left HeldObjects
	var err error
	if left.Programs, err = stillLoaded(h.Programs, func(id uint32) (io.Closer, error) {
		return ebpf.NewProgramFromID(ebpf.ProgramID(id))
	}); err != nil {
		return left, err
	}
	if left.Links, err = stillLoaded(h.Links, func(id uint32) (io.Closer, error) {
		return link.NewFromID(link.ID(id))
	}); err != nil {
		return left, err
	}
	left.Maps, err = stillLoaded(h.Maps, func(id uint32) (io.Closer, error) {
		return ebpf.NewMapFromID(ebpf.MapID(id))
	})
	return left, err
}

// stillLoaded is those of ids that open finds.
func stillLoaded(ids []uint32, open func(uint32) (io.Closer, error)) ([]uint32, error) {
	var left []uint32
	for _, id := range ids {
		obj, err := open(id)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return left, fmt.Errorf("looking up BPF object %d: %w", id, err)
		default:
			obj.Close()
			left = append(left, id)
		}
	}
	return left, nil
}
