package collector

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// DefaultStackHz is how often each CPU's sampling clock ticks by default:
// not a divisor of the kernel's scheduler tick (100 to 1000 Hz), so that
// samples do not fall in step with what the tick drives.
const DefaultStackHz = 999

// MaxStackHz bounds --stack-hz: the sampling program's cost grows with it,
// and the kernel refuses rates above kernel.perf_event_max_sample_rate.
const MaxStackHz = 10_000

// sampler is one software cpu-clock perf event per CPU, each running
// sample_stack when it fires.
type sampler struct {
	events []int // perf event fds
	links  []link.Link
}

// stackPeriodNs is the sampling period of hz: the cpu-clock event takes a
// frequency as a fixed period of wall time on the CPU, so each sample
// stands for this much of it.
func stackPeriodNs(hz int) uint64 { return uint64(1e9 / hz) }

// openSampler opens a cpu-clock event on each online CPU, hz times a
// second, and attaches prog to each. On error it closes what it opened.
func openSampler(prog *ebpf.Program, hz int) (*sampler, error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	return openSamplerOn(prog, hz, cpus)
}

// openSamplerOn is openSampler on the given CPUs.
func openSamplerOn(prog *ebpf.Program, hz int, cpus []int) (*sampler, error) {
	s := &sampler{}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: stackPeriodNs(hz),
			Bits:   unix.PerfBitDisabled,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			s.close()
			return nil, describePerfError(err, cpu)
		}
		s.events = append(s.events, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			s.close()
			return nil, fmt.Errorf("attaching the stack sampler on CPU %d: %w", cpu, err)
		}
		s.links = append(s.links, l)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			s.close()
			return nil, fmt.Errorf("starting the stack sampler on CPU %d: %w", cpu, err)
		}
	}
	return s, nil
}

func describePerfError(err error, cpu int) error {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return setupError{fmt.Sprintf("opening a perf event on CPU %d was refused (needs root or CAP_PERFMON): %v", cpu, err), ErrUnsupported}
	case errors.Is(err, unix.EINVAL):
		return setupError{fmt.Sprintf("the kernel refused a cpu-clock perf event on CPU %d (a rate above kernel.perf_event_max_sample_rate?): %v", cpu, err), ErrUnsupported}
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.EOPNOTSUPP):
		return setupError{fmt.Sprintf("this kernel has no cpu-clock perf event on CPU %d: %v", cpu, err), ErrUnsupported}
	}
	return fmt.Errorf("opening a perf event on CPU %d: %w", cpu, err)
}

// detach stops sampling: no sample is sent after it.
func (s *sampler) close() {
	if s == nil {
		return
	}
	for _, l := range s.links {
		l.Close()
	}
	for _, fd := range s.events {
		unix.Close(fd)
	}
	s.links, s.events = nil, nil
}

// onlineCPUs lists the CPUs the kernel runs, from
// /sys/devices/system/cpu/online ("0-3,6").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("listing CPUs: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("listing CPUs: %w", err)
	}
	return cpus, nil
}

// maxCPUs bounds the CPU numbers a list may hold, and the CPUs it may
// list: far above any kernel's NR_CPUS (8192 at most on x86-64), so a
// list past it is no kernel's, and the sampler opens no event per CPU of
// it.
const maxCPUs = 1 << 16

// parseCPUList reads the kernel's CPU list format: ranges and numbers,
// separated by commas.
func parseCPUList(list string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(list, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 || first >= maxCPUs {
			return nil, fmt.Errorf("bad CPU list %q", list)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first || last >= maxCPUs {
				return nil, fmt.Errorf("bad CPU list %q", list)
			}
		}
		if len(cpus)+last-first+1 > maxCPUs {
			return nil, fmt.Errorf("bad CPU list %q: more than %d CPUs", list, maxCPUs)
		}
		for cpu := first; cpu <= last; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("no CPU in %q", list)
	}
	return cpus, nil
}
