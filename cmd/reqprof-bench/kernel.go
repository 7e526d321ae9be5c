package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// userHz is the unit of /proc/stat's CPU times, USER_HZ, 100 on every
// architecture Linux supports with BPF trampolines.
const userHz = 100

// machineBusyNs is the CPU every process and interrupt used so far, summed
// over the CPUs: /proc/stat's first line, all but idle and iowait.
func machineBusyNs() (uint64, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal
	for i, f := range fields[1:9] {
		ticks, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc/stat line %q", line)
		}
		if i != 3 && i != 4 {
			busy += ticks
		}
	}
	return busy * (1e9 / userHz), nil
}

// irqWorkInterrupts is the machine's count of IRQ work interrupts so far
// (the IWI line of /proc/interrupts, summed over CPUs). A BPF program that
// wakes a ring buffer's reader raises one: the count tells how often
// reqprof's collector is woken.
func irqWorkInterrupts() (uint64, error) {
	data, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "IWI:" {
			continue
		}
		var sum uint64
		for _, f := range fields[1:] {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				break // the description after the counts
			}
			sum += n
		}
		return sum, nil
	}
	return 0, errors.New("no IWI line in /proc/interrupts")
}

// rssBytes is the process's resident memory now (VmRSS).
func rssBytes(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kib * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// bpfObjects are the programs and maps one reqprof process holds. They are
// found through its own file descriptors, not by name, so that another
// reqprof running on the machine (a test, say) is never counted.
type bpfObjects struct {
	programs []*ebpf.Program
	maps     map[string]*ebpf.Map // by name
}

func openBPFObjects(pid int) (*bpfObjects, error) {
	progIDs, mapIDs, err := bpfIDsOf(pid)
	if err != nil {
		return nil, err
	}
	objs := &bpfObjects{maps: map[string]*ebpf.Map{}}
	for id := range progIDs {
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			objs.close()
			return nil, fmt.Errorf("opening BPF program %d: %w", id, err)
		}
		objs.programs = append(objs.programs, p)
	}
	for id := range mapIDs {
		m, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			objs.close()
			return nil, fmt.Errorf("opening BPF map %d: %w", id, err)
		}
		info, err := m.Info()
		if err != nil {
			m.Close()
			objs.close()
			return nil, err
		}
		objs.maps[info.Name] = m
	}
	if len(objs.programs) == 0 {
		return nil, fmt.Errorf("process %d holds no BPF program", pid)
	}
	return objs, nil
}

// bpfIDsOf reads the prog_id and map_id lines of the process's descriptors'
// fdinfo: a program, map or link descriptor names its object there.
func bpfIDsOf(pid int) (progIDs, mapIDs map[uint64]bool, err error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	progIDs, mapIDs = map[uint64]bool{}, map[uint64]bool{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		for line := range strings.Lines(string(data)) {
			key, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
			if err != nil {
				continue
			}
			switch key {
			case "prog_id":
				progIDs[id] = true
			case "map_id":
				mapIDs[id] = true
			}
		}
	}
	return progIDs, mapIDs, nil
}

func (o *bpfObjects) close() {
	for _, p := range o.programs {
		p.Close()
	}
	for _, m := range o.maps {
		m.Close()
	}
}

// programRun is one program's run statistics, from BPF_ENABLE_STATS.
type programRun struct {
	name    string
	calls   uint64
	runTime time.Duration
}

// programRuns reads every program's statistics now.
func (o *bpfObjects) programRuns() ([]programRun, error) {
	var runs []programRun
	for _, p := range o.programs {
		info, err := p.Info()
		if err != nil {
			return nil, err
		}
		stats, err := p.Stats()
		if err != nil {
			return nil, err
		}
		runs = append(runs, programRun{name: info.Name, calls: stats.RunCount, runTime: stats.Runtime})
	}
	return runs, nil
}

// entries counts a map's keys. Keys deleted during the walk make the kernel
// restart it from the first key, so keys are counted once each, and the
// walk is bounded.
func entries(m *ebpf.Map) (int, error) {
	seen := map[string]bool{}
	var key any // nil asks for the first key
	for range 4 * int(m.MaxEntries()) {
		next, err := m.NextKeyBytes(key)
		if err != nil {
			return 0, err
		}
		if next == nil {
			return len(seen), nil
		}
		seen[string(next)] = true
		key = next
	}
	return len(seen), errors.New("map changed too fast to count")
}

// enableRunStats turns on the kernel's BPF run-time statistics, system-wide,
// until the returned closer is closed. They cost every BPF program two clock
// reads per call, so they are on only in runs that measure BPF run time.
func enableRunStats() (io.Closer, error) {
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time statistics: %w", err)
	}
	return closer, nil
}

// processSwitches is how many times the threads of process pid have been
// switched out so far, voluntarily or not (the ctxt_switches lines of
// each /proc/PID/task/TID/status): a server that switches more per
// request when reqprof is attached pays for that in its own code and
// the scheduler's, which no count of reqprof's program runs covers.
func processSwitches(pid int) (uint64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // a thread that exited meanwhile
		}
		for _, line := range strings.Split(string(data), "\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok || !strings.HasSuffix(name, "ctxt_switches") {
				continue
			}
			if n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64); err == nil {
				sum += n
			}
		}
	}
	return sum, nil
}
