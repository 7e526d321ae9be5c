package collector

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/profile"
)

// calibrationRounds and calibrationSyscalls size one spell of the
// measurement of the syscall entry cost.
const (
	calibrationRounds   = 3
	calibrationSyscalls = 4000
)

// calibrationTarget is the target index the collector's own process takes
// while it calibrates: the last one, which no user target gets.
const calibrationTarget = MaxTargets

// calibrateSyscallEntry measures what one syscall costs outside the time the
// programs charge to it: the kernel's entry and exit paths (with their
// speculation mitigations) and the programs' own work around their clock
// reads. On a thread of this process, made a target for the while, it is
// the CPU clock's cost per getppid() less what the programs charge. The
// programs must be attached and enabled.
func calibrateSyscallEntry(objs *bpfObjects) (uint64, error) {
	// The mean of rounds in several spells some ms apart. On a virtual
	// machine a stretch of a few ms can run every syscall a fifth slower
	// (the host's doing), and the window's syscalls run in such stretches
	// as often as the host makes them: what they pay is the mean over
	// time, which a middle of a few measures is not (40 spells of 1,000
	// getppid here, 20 ms apart: their mean 5% over their median).
	var sum, n uint64
	err := inSpells(func() error {
		rounds, err := measureSyscallEntry(objs)
		for _, ns := range rounds {
			sum += ns
			n++
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return sum / n, nil
}

// inSpells runs measure calibrationSpells times, calibrationSpacing
// apart, until it fails.
func inSpells(measure func() error) error {
	for i := range calibrationSpells {
		if i > 0 {
			time.Sleep(calibrationSpacing)
		}
		if err := measure(); err != nil {
			return err
		}
	}
	return nil
}

// calibrationSpells measures, calibrationSpacing apart, make one
// calibration.
const (
	calibrationSpells  = 6
	calibrationSpacing = 20 * time.Millisecond
)

// measureSyscallEntry is one spell: each of its rounds' cost per syscall
// outside the programs' charge.
func measureSyscallEntry(objs *bpfObjects) ([]uint64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := uint32(os.Getpid())
	if err := objs.Targets.Put(self, uint32(calibrationTarget)); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	// Open, as a target's window is, for the measure; closed after.
	var opened [reqprofLimitsMAX_TARGETS]uint64
	opened[calibrationTarget] = monotonicNs()
	if err := objs.TargetOpenedNs.Set(opened); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	defer objs.TargetOpenedNs.Set([reqprofLimitsMAX_TARGETS]uint64{})
	// Answers cached before this process became a target are void.
	if err := objs.TargetsGeneration.Set(uint32(generationCalibrating)); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	defer func() {
		objs.Targets.Delete(self)
		objs.TargetsGeneration.Set(uint32(generationNoTargets)) // forget this process was a target
	}()
	tid := uint32(unix.Gettid())
	cookie := calibrationCookie | calibrationMeasures.Add(1)
	if err := serveFakeRequest(objs, cookie); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	defer objs.Conns.Delete(cookie)
	if err := objs.CalibrationTid.Set(tid); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	defer objs.CalibrationTid.Set(uint32(0))

	var perSyscall []uint64
	for range calibrationRounds {
		var before, after uint64
		if err := objs.CalibrationSyscallNs.Get(&before); err != nil {
			return nil, fmt.Errorf("calibrating: %w", err)
		}
		start := threadCPUNs()
		for range calibrationSyscalls {
			unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
		}
		spent := threadCPUNs() - start
		if err := objs.CalibrationSyscallNs.Get(&after); err != nil {
			return nil, fmt.Errorf("calibrating: %w", err)
		}
		seen := after - before
		if seen == 0 {
			continue // the thread moved before its state took; the next round counts
		}
		if spent > seen {
			perSyscall = append(perSyscall, (spent-seen)/calibrationSyscalls)
		} else {
			perSyscall = append(perSyscall, 0)
		}
	}
	if len(perSyscall) == 0 {
		return nil, fmt.Errorf("calibrating: the syscall tracepoints saw none of %d syscalls", calibrationRounds*calibrationSyscalls)
	}
	return perSyscall, nil
}

// calibrationCookie | n names the made-up connection the calibrating thread
// serves in the collector's nth measure; socket cookies count up from 1 and
// never reach it.
const calibrationCookie = uint64(1) << 63

// calibrationMeasures counts the measures taken, so that each has a
// connection of its own.
var calibrationMeasures atomic.Uint64

// serveFakeRequest opens a request on a made-up connection, which the
// programs make the calibrating thread serve from its next syscall once
// calibration_tid names it: its syscalls then take the programs' full path,
// the one a server's do, and its cost is what gets measured.
func serveFakeRequest(objs *bpfObjects, cookie uint64) error {
	var c reqprofConnState
	c.Rec.Target = uint32(calibrationTarget)
	c.Phase = reqprofConnPhasePHASE_READING
	c.Role = reqprofConnRoleROLE_SERVER
	if err := objs.Conns.Put(cookie, &c); err != nil {
		return err
	}
	return objs.CalibrationCookie.Set(cookie)
}

// measureSyscallLoop is the CPU one getppid() takes on this thread, a
// figure for each round of calibrationSpells spells calibrationSpacing
// apart: as for the entry cost, the mean over time is what a window pays.
func measureSyscallLoop() []float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var perSyscall []float64
	inSpells(func() error {
		for range calibrationRounds {
			start := threadCPUNs()
			for range calibrationSyscalls {
				unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
			}
			perSyscall = append(perSyscall, float64(threadCPUNs()-start)/calibrationSyscalls)
		}
		return nil
	})
	return perSyscall
}

// entryPerRun is what entering one program costs, from a syscall's cost
// in rounds before the programs were attached (bare) and after (attached,
// not yet enabled: each of its two runs returns at once), and the
// standard error of that figure. It includes the slower syscall path the
// syscall tracepoints switch on, and the few loads before a program
// returns.
func entryPerRun(bare, attached []float64) (ns, spreadNs float64) {
	meanBare, errBare := meanAndError(bare)
	meanAttached, errAttached := meanAndError(attached)
	spreadNs = math.Sqrt(errBare*errBare+errAttached*errAttached) / 2
	if meanAttached <= meanBare {
		return 0, spreadNs
	}
	return (meanAttached - meanBare) / 2, spreadNs
}

// meanAndError is the mean of xs and its standard error (0 for fewer
// than two).
func meanAndError(xs []float64) (mean, stdErr float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sq / float64(len(xs)-1) / float64(len(xs)))
}

func threadCPUNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return uint64(ts.Nano())
}

// hostMeta says where and when a run was made, so saved runs can be
// checked for comparability.
func hostMeta(syscallEntryNs uint64) profile.Meta {
	meta := profile.Meta{StartedAt: time.Now().UTC(), SyscallEntryNs: syscallEntryNs}
	meta.Host, _ = os.Hostname()
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		meta.Kernel = strings.TrimRight(string(uts.Release[:]), "\x00")
	}
	return meta
}
