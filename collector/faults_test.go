package collector

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// Events the programs could not keep (a full ring buffer, a full thread or
// connection map) reach the target's lost events, by cause, and the
// report says them in a warning: never silent.
func TestLostEventsSurfaceAsWarnings(t *testing.T) {
	procs := []*process{{Target: Target{PID: 10}, comm: "srv"}, {Target: Target{PID: 11}, comm: "other"}}
	stats := []reqprofTargetStats{{LostRecords: 4, LostThreads: 2, LostConns: 1}, {}}
	b := newRunBuilder(procs, newConsumeResult(2), stats)
	run := b.run(profile.Meta{}, 0, uint64(time.Second))

	got := run.Targets[0]
	wantBreakdown := map[string]uint64{"ring_buffer": 4, "thread_map_full": 2, "conn_map_full": 1}
	if got.LostEvents != 7 || len(got.LostBreakdown) != len(wantBreakdown) {
		t.Fatalf("lost %d %v, want 7: %v", got.LostEvents, got.LostBreakdown, wantBreakdown)
	}
	for cause, n := range wantBreakdown {
		if got.LostBreakdown[cause] != n {
			t.Errorf("lost %d to %s, want %d", got.LostBreakdown[cause], cause, n)
		}
	}
	if run.Targets[1].LostEvents != 0 || run.Targets[1].LostBreakdown != nil {
		t.Errorf("the other target lost %d %v, want none", run.Targets[1].LostEvents, run.Targets[1].LostBreakdown)
	}

	s := report.Summarize(run)
	want := "7 events lost (ring buffer full 4, thread state not created 2, connection map full 1): some CPU time or requests are missing"
	if target := s.Targets[0]; !target.Partial || len(target.Warnings) != 1 || target.Warnings[0] != want {
		t.Errorf("partial %v, warnings %q; want partial and %q", target.Partial, target.Warnings, want)
	}
	if target := s.Targets[1]; target.Partial {
		t.Errorf("the target that lost nothing is partial: %q", target.Warnings)
	}
	var table strings.Builder
	if err := report.WriteTable(&table, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "WARNING: "+want+"\n") {
		t.Errorf("the table does not say %q:\n%s", want, table.String())
	}
}

func TestParseImage(t *testing.T) {
	// proc(5): fields 26, 27, 28 and 48 are startcode, endcode,
	// startstack and arg_start; a name may hold spaces and parentheses.
	fields := make([]string, 52)
	for i := range fields {
		fields[i] = strconv.Itoa(i + 1)
	}
	fields[2] = "S"
	line := "4242 (a (b) c) " + strings.Join(fields[2:], " ") + "\n"
	var img image
	if err := parseImage(line, &img); err != nil {
		t.Fatal(err)
	}
	if img.startCode != 26 || img.endCode != 27 || img.startStack != 28 || img.argStart != 48 {
		t.Errorf("parsed %+v from %q", img, line)
	}
	for _, bad := range []string{"", "4242 (x) S 1 2 3", "4242 (x) " + strings.Repeat("x ", 50)} {
		if err := parseImage(bad, &img); err == nil {
			t.Errorf("parsed %q without an error", bad)
		}
	}
}

// startShell runs script in sh with a pipe to its stdin; the process is
// killed and reaped at the end of the test.
func startShell(t *testing.T, script string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, stdin
}

// pollUntil polls p until it finds want, for at most 5 s.
func pollUntil(t *testing.T, p *process, want targetChange) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got := p.poll(time.Second); got == want {
			return
		}
	}
	t.Fatalf("no poll found %d in 5 s", want)
}

// A target that execs is seen to, by its new binary or, for the same
// binary, by where the exec placed its code and stack; one that exits is
// seen to, and what is read by its pid is no longer kept.
func TestPollSeesExecAndExit(t *testing.T) {
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if sleepPath, err = filepath.EvalSymlinks(sleepPath); err != nil {
		t.Fatal(err)
	}
	randomised, _ := os.ReadFile("/proc/sys/kernel/randomize_va_space")
	for _, tc := range []struct {
		name, script string
		sameBinary   bool
	}{
		{"another binary", "read x; exec sleep 100", false},
		{"the same binary", `read x; exec sh -c "read y; sleep 100"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sameBinary && strings.TrimSpace(string(randomised)) == "0" {
				t.Skip("address randomisation is off: an exec of the same binary looks the same")
			}
			cmd, stdin := startShell(t, tc.script)
			p, err := openProcess(Target{PID: cmd.Process.Pid})
			if err != nil {
				t.Fatal(err)
			}
			defer closePidfd(p)
			shPath, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
			if err != nil {
				t.Fatal(err)
			}
			// Started by fork and exec, it may still be inside the exec:
			// its image is then known at a later poll.
			for deadline := time.Now().Add(5 * time.Second); !p.imageKnown && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				p.poll(0)
			}
			if got := p.poll(time.Second); got != targetRunning || p.execd != "" || !p.imageKnown {
				t.Fatalf("before the exec: poll %d, execd %q, image known %v; want it running as it was", got, p.execd, p.imageKnown)
			}
			io.WriteString(stdin, "go\n")
			pollUntil(t, p, targetExecd)
			want := sleepPath
			if tc.sameBinary {
				want = shPath
			}
			if p.execd != want || p.execdAfter != time.Second {
				t.Errorf("execd %q after %v, want %q after 1s", p.execd, p.execdAfter, want)
			}
			if got := p.poll(2 * time.Second); got != targetRunning || p.execdAfter != time.Second {
				t.Errorf("the next poll: %d, execd after %v; want the new program running, the first exec kept", got, p.execdAfter)
			}

			p.schedNsAt = 42
			cmd.Process.Kill()
			cmd.Wait()
			if got := p.poll(3 * time.Second); got != targetExited || !p.exited {
				t.Errorf("after the exit: poll %d, exited %v", got, p.exited)
			}
			if p.schedNsAt != 42 {
				t.Errorf("the CPU clock of an exited target was read: %d", p.schedNsAt)
			}
		})
	}
}

func closePidfd(p *process) { unix.Close(p.pidfd) }

// A pid given to another process once the target has exited is the
// target's no more: the pidfd says the target exited, and nothing read
// by the pid is kept. The kernel gives the pid again when ns_last_pid
// (root only) is set just below it and nothing else forks first.
func TestPollTakesAReusedPidForExited(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting the next pid needs root")
	}
	first := exec.Command("sleep", "100")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	pid := first.Process.Pid
	p, err := openProcess(Target{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	defer closePidfd(p)
	if got := p.poll(time.Second); got != targetRunning {
		t.Fatalf("poll %d, want the target running", got)
	}
	first.Process.Kill()
	first.Wait()

	var second *exec.Cmd
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("setting the next pid: %v", err)
		}
		cmd := exec.Command("sleep", "100")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			second = cmd
			break
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	if second == nil {
		t.Skipf("pid %d was not given again in 50 tries: other processes forked first", pid)
	}
	defer func() {
		second.Process.Kill()
		second.Wait()
	}()
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Fatalf("pid %d names no process again: %v", pid, err)
	}
	p.schedNsAt = 42
	if got := p.poll(2 * time.Second); got != targetExited || !p.exited {
		t.Errorf("with pid %d another process's: poll %d, exited %v; want the target exited", pid, got, p.exited)
	}
	if p.schedNsAt != 42 || p.execd != "" {
		t.Errorf("the other process was taken for the target: CPU clock %d, execd %q", p.schedNsAt, p.execd)
	}
}
