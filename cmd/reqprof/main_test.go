package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/profile"
)

// asReqprof, set in a child's environment, makes the test binary run as
// reqprof itself: the demo starts its servers as children of its own
// binary, which in a test is this one.
const asReqprof = "REQPROF_TEST_AS_REQPROF"

func TestMain(m *testing.M) {
	if os.Getenv(asReqprof) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// onHost makes checkHost see a host with or without privileges and BTF,
// for the test.
func onHost(t *testing.T, root, btf bool) {
	t.Helper()
	oldPrivileged, oldPath := privileged, kernelBTFPath
	t.Cleanup(func() { privileged, kernelBTFPath = oldPrivileged, oldPath })
	privileged = func() (bool, error) { return root, nil }
	kernelBTFPath = filepath.Join(t.TempDir(), "vmlinux")
	if btf {
		if err := os.WriteFile(kernelBTFPath, nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
}

// Every bad invocation ends with exit code 2 and one line saying why,
// before anything is loaded: no panic, no flag list, no Go package name.
func TestBadInvocations(t *testing.T) {
	foreign := filepath.Join(t.TempDir(), "foreign.json")
	if err := os.WriteFile(foreign, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(t.TempDir(), "list.json")
	if err := os.WriteFile(list, []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile("testdata/a.json")
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.json")
	if err := os.WriteFile(truncated, saved[:len(saved)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args     []string
		root     bool // whether the host has privileges (and BTF)
		wantLine string
	}{
		{[]string{"frobnicate"}, true, `reqprof: unknown command "frobnicate" (reqprof --help lists them)`},
		{[]string{"attach"}, true, "reqprof: attach needs --pid PID or --cgroup DIR"},
		{[]string{"attach", "--pid", "abc"}, true, `reqprof: --pid "abc": not a process id: want PID or PID=LABEL`},
		{[]string{"attach", "--pid", "1", "--group-by", "foo"}, true, `reqprof: cannot group requests by "foo": want route, port or none`},
		{[]string{"attach", "--pid", "1", "--stdio", "sometimes"}, true, `reqprof: --stdio "sometimes": want auto, on or off`},
		{[]string{"attach", "--pid", "1", "extra"}, true, `reqprof: unexpected argument "extra" (attach takes flags only)`},
		{[]string{"attach", "--pid", "1", "--pid", "1"}, true, "reqprof: pid 1 given twice"},
		{[]string{"attach", "--pid"}, true, "reqprof: --pid needs a value"},
		{[]string{"attach", "--pid", "1", "--frobnicate"}, true, "reqprof: unknown flag --frobnicate (reqprof attach --help lists them)"},
		{[]string{"attach", "--pid", "1", "--duration", "soon"}, true, `reqprof: --duration "soon": not a duration, such as 10s or 500ms`},
		{[]string{"attach", "--pid", "1", "--duration", "-1s"}, true, "reqprof: --duration -1s: want 0 or more"},
		{[]string{"attach", "--pid", "1", "--repeat", "2"}, true, "reqprof: --repeat needs --duration for each window"},
		{[]string{"attach", "--pid", "1", "--capture-bytes", "0"}, true, "reqprof: --capture-bytes 0: want 1 to 512"},
		{[]string{"attach", "--pid", "1", "--role", "proxy"}, true, `reqprof: --role "proxy": want client, server or both`},
		{[]string{"attach", "--pid", "1", "--stacks", "--stack-hz", "0"}, true, "reqprof: --stack-hz 0: want 1 to 10000"},
		{[]string{"attach", "--pid", "1", "--stack-hz", "20000"}, true, "reqprof: --stack-hz 20000: want 1 to 10000"},
		{[]string{"attach", "--pid", "1", "--pprof", "-"}, true, "reqprof: --pprof and --folded write to a file, not to stdout"},
		{[]string{"attach", "--pid", "1", "--folded", "/nonexistent/run.folded"}, true, "reqprof: --folded /nonexistent/run.folded: no directory /nonexistent to write it in"},
		{[]string{"compare", "--pprof", "x", "testdata/a.json"}, true, "reqprof: unknown flag --pprof (reqprof compare --help lists them)"},
		{[]string{"attach", "--pid", "1073741824"}, true, "reqprof: no process with pid 1073741824"},
		{[]string{"attach", "--cgroup", "/nonexistent"}, true, "reqprof: cgroup /nonexistent: open /nonexistent/cgroup.procs: no such file or directory"},
		{[]string{"attach", "--pid", "1", "--json", "/nonexistent/run.json"}, true, "reqprof: --json /nonexistent/run.json: no directory /nonexistent to write it in"},
		{[]string{"compare", "--html", "/nonexistent/run.html", "testdata/a.json"}, true, "reqprof: --html /nonexistent/run.html: no directory /nonexistent to write it in"},
		{[]string{"attach", "--pid", "1"}, false, "reqprof needs root (or CAP_BPF and CAP_PERFMON) to load its programs"},
		{[]string{"demo"}, false, "reqprof needs root (or CAP_BPF and CAP_PERFMON) to load its programs"},
		{[]string{"demo", "--conns", "0"}, true, "reqprof: --requests 4000, --conns 0: want 1 or more of each"},
		{[]string{"demo", "--group-by", "foo"}, true, `reqprof: cannot group requests by "foo": want route, port or none`},
		{[]string{"compare", foreign}, true, "reqprof: " + foreign + `: not a reqprof run: the top level has no "duration_s"`},
		{[]string{"compare", list}, true, "reqprof: " + list + ": not a reqprof run: a JSON array, where a run is an object"},
		{[]string{"compare", truncated}, true, "reqprof: " + truncated + ": truncated: the JSON ends at byte"},
		{[]string{"compare", "testdata/missing.json"}, true, "reqprof: testdata/missing.json: no such file or directory"},
		{[]string{"compare", "--floor"}, true, "reqprof: --floor needs a value"},
		{[]string{"version", "extra"}, true, "reqprof: version takes no arguments"},
		{[]string{"attach", "--pid", "1", "--requests", "/nonexistent/r.ndjson"}, true, "reqprof: --requests /nonexistent/r.ndjson: no directory /nonexistent to write it in"},
		{[]string{"attach", "--pid", "1", "--requests-rate", "0"}, true, "reqprof: --requests-rate 0: want at least 1"},
		{[]string{"serve"}, true, "reqprof: serve needs a target: --pid PID, --cgroup DIR, --comm NAME or --port N"},
		{[]string{"serve", "--port", "http"}, true, `reqprof: --port "http": not a TCP port: want 1 to 65535`},
		{[]string{"serve", "--port", "70000"}, true, `reqprof: --port "70000": not a TCP port: want 1 to 65535`},
		{[]string{"serve", "--comm", ""}, true, `reqprof: --comm "": empty command name`},
		{[]string{"serve", "--comm", "nginx", "--max-routes", "0"}, true, "reqprof: --max-routes 0: want at least 1"},
		{[]string{"serve", "--comm", "nginx", "--listen", "nowhere"}, true, "reqprof: --listen nowhere: address nowhere: missing port in address"},
		{[]string{"serve", "--pid", "1073741824"}, true, "reqprof: no process with pid 1073741824"},
		{[]string{"serve", "--comm", "nginx", "extra"}, true, `reqprof: unexpected argument "extra" (serve takes flags only)`},
		{[]string{"serve", "--comm", "nginx", "--listen", "127.0.0.1:0"}, false, "reqprof needs root (or CAP_BPF and CAP_PERFMON) to load its programs"},
	} {
		onHost(t, tc.root, true)
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.wantLine) {
			t.Errorf("reqprof %q: exit %d, stderr %q; want exit 2 and one line starting %q", tc.args, code, stderr.String(), tc.wantLine)
		}
		if strings.Contains(stderr.String(), "report:") || strings.Contains(stderr.String(), " -pid") {
			t.Errorf("reqprof %q: stderr %q names a Go package or a -flag", tc.args, stderr.String())
		}
		if stdout.Len() > 0 {
			t.Errorf("reqprof %q printed to stdout despite failing:\n%s", tc.args, stdout.String())
		}
	}
}

// A kernel without BTF is said in one line, whatever the other checks.
// A --listen address in use is said in one line, and serve exits 2
// before it loads anything.
func TestServeListenInUse(t *testing.T) {
	onHost(t, true, true)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--comm", "nginx", "--listen", taken.Addr().String()}, &stdout, &stderr)
	if want := "reqprof: --listen " + taken.Addr().String() + ": address already in use\n"; code != 2 || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr.String(), want)
	}
}

func TestNoKernelBTF(t *testing.T) {
	for _, args := range [][]string{{"attach", "--pid", "1"}, {"demo"}} {
		onHost(t, true, false)
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := "reqprof: this kernel has no BTF (" + kernelBTFPath + " is missing): reqprof needs one built with CONFIG_DEBUG_INFO_BTF=y\n"
		if code != 2 || stderr.String() != want {
			t.Errorf("reqprof %q without BTF: exit %d, stderr %q; want exit 2 and %q", args, code, stderr.String(), want)
		}
	}
}

// Privileges are checked before the kernel: without them, that is the one
// thing said.
func TestNotRootComesFirst(t *testing.T) {
	onHost(t, false, false)
	var stdout, stderr bytes.Buffer
	code := run([]string{"attach", "--pid", "1"}, &stdout, &stderr)
	if want := "reqprof needs root (or CAP_BPF and CAP_PERFMON) to load its programs\n"; code != 2 || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr.String(), want)
	}
	privileged = func() (bool, error) { return false, errors.New("no /proc") }
	stderr.Reset()
	if code := run([]string{"attach", "--pid", "1"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "could not read its own capabilities: no /proc") {
		t.Errorf("capabilities unreadable: exit %d, stderr %q", code, stderr.String())
	}
}

// Each command's --help shows its synopsis and its flags as --flag, on
// stdout, and exits 0; the top help lists the commands.
func TestHelp(t *testing.T) {
	singleDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, tc := range []struct {
		args      []string
		synopsis  string
		wantFlags []string
	}{
		{[]string{"attach", "--help"}, "usage: reqprof attach --pid PID[=LABEL] [--pid ...] [flags]\n",
			[]string{"--pid PID[=LABEL]", "--cgroup DIR[=LABEL]", "--follow-children", "--stdio auto|on|off", "--floor PID[=LABEL]", "--repeat N",
				"--duration DURATION", "--json FILE", "--html FILE", "--group-by route|port|none", "--syscalls", "--capture-bytes N", "--no-payload"}},
		{[]string{"demo", "-h"}, "usage: reqprof demo [flags]\n",
			[]string{"--requests N", "--conns N", "--duration DURATION", "--json FILE"}},
		{[]string{"compare", "--help"}, "usage: reqprof compare [flags] RUN.json...\n",
			[]string{"--floor N|LABEL", "--json FILE", "--html FILE"}},
		{[]string{"help", "compare"}, "usage: reqprof compare [flags] RUN.json...\n", []string{"--floor N|LABEL"}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		help := stdout.String()
		if code != 0 || stderr.Len() > 0 || !strings.HasPrefix(help, tc.synopsis) {
			t.Errorf("reqprof %q: exit %d, stderr %q, help starting %q; want exit 0 and help starting %q",
				tc.args, code, stderr.String(), firstLine(help), tc.synopsis)
		}
		for _, flag := range tc.wantFlags {
			if !strings.Contains(help, "\n  "+flag+" ") && !strings.Contains(help, "\n  "+flag+"\n") {
				t.Errorf("reqprof %q lists no %q:\n%s", tc.args, flag, help)
			}
		}
		if singleDash.MatchString(help) {
			t.Errorf("reqprof %q lists a flag with one dash:\n%s", tc.args, help)
		}
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("reqprof --help: exit %d", code)
	}
	for _, c := range commands {
		if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(stdout.String()) {
			t.Errorf("reqprof --help lists no line for %s:\n%s", c.name, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "run with --help for all flags") {
		t.Errorf("reqprof --help still sends people to --help:\n%s", stdout.String())
	}
	// With no command, the same help goes to stderr and the exit is 2.
	stdout.Reset()
	if code := run(nil, &stdout, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), "usage: reqprof COMMAND") {
		t.Errorf("reqprof alone: exit %d, stderr %q", code, firstLine(stderr.String()))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// A default the help shows is the flag's own: --duration's is 0, and no
// synopsis shows another.
func TestHelpShowsRealDefaults(t *testing.T) {
	var out outputFlags
	c := newCommand("attach", attachSynopsis, "")
	out.register(c, "until Ctrl-C")
	repeat := c.Int("repeat", 1, "`N` windows")
	if err := c.parse(nil, nil); err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	c.writeHelp(&help)
	for _, tc := range []struct {
		flag, want string
		value      any
	}{
		{"--duration DURATION", "(default 0s)", out.duration},
		{"--repeat N", "(default 1)", *repeat},
		{"--capture-bytes N", "(default 512)", out.capture.bytes},
		{"--group-by route|port|none", "(default route)", out.groupBy},
	} {
		_, text, _ := strings.Cut(help.String(), "\n  "+tc.flag)
		text, _, _ = strings.Cut(text, "\n  --")
		if !strings.Contains(strings.Join(strings.Fields(text), " "), tc.want) {
			t.Errorf("help of %s: %q, want it to say %s (the value unset: %v)", tc.flag, text, tc.want, tc.value)
		}
	}
	if out.duration != 0 {
		t.Errorf("--duration defaults to %v, the help says 0s", out.duration)
	}
	if strings.Contains(attachSynopsis, "--duration") {
		t.Errorf("the synopsis %q shows a duration of its own", attachSynopsis)
	}
}

func TestPidFlagTakesLabels(t *testing.T) {
	var p pidFlags
	for _, v := range []string{"111=rust-sdk", "222"} {
		if err := p.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if len(p) != 2 || p[0].PID != 111 || p[0].Label != "rust-sdk" || p[1].PID != 222 || p[1].Label != "" {
		t.Errorf("parsed %+v", p)
	}
}

func TestBuildVersion(t *testing.T) {
	vcs := func(revision, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: revision}, {Key: "vcs.modified", Value: modified},
		}}
	}
	for _, tc := range []struct {
		name                    string
		ldVersion, ldCommit     string
		info                    *debug.BuildInfo
		wantVersion, wantCommit string
	}{
		{"make build", "v0.3.0-4-gc85c431", "", vcs("c85c431e1f2a3b4c5d6e7f8091a2b3c4d5e6f708", "false"), "v0.3.0-4-gc85c431", "c85c431e1f2a"},
		{"changed tree", "", "", vcs("c85c431e1f2a3b4c5d6e7f8091a2b3c4d5e6f708", "true"), "", "c85c431e1f2a-dirty"},
		{"go install", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", ""},
		{"worktree, no VCS info", "c85c431-dirty", "c85c431e1f2a-dirty", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "c85c431-dirty", "c85c431e1f2a-dirty"},
		{"no build info", "", "", nil, "", ""},
	} {
		ver, commit := buildVersion(tc.ldVersion, tc.ldCommit, tc.info)
		if ver != tc.wantVersion || commit != tc.wantCommit {
			t.Errorf("%s: version %q, commit %q; want %q, %q", tc.name, ver, commit, tc.wantVersion, tc.wantCommit)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	oldVersion, oldCommit := version, commit
	t.Cleanup(func() { version, commit = oldVersion, oldCommit })
	version, commit = "v9.9.9", "0123456789ab"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		// Test binaries carry no VCS revision: the one the build set shows.
		if want := "reqprof v9.9.9 (commit 0123456789ab)\n"; code != 0 || stdout.String() != want {
			t.Errorf("reqprof %q: exit %d, stdout %q, stderr %q; want %q", args, code, stdout.String(), stderr.String(), want)
		}
	}
}

// The JSON of a run says which reqprof took it.
func TestJSONSaysVersion(t *testing.T) {
	oldVersion, oldCommit := version, commit
	t.Cleanup(func() { version, commit = oldVersion, oldCommit })
	version, commit = "v9.9.9", "0123456789ab"
	run := profile.Run{Duration: time.Second, Targets: []profile.Target{{PID: 1, Comm: "x"}}}
	var stdout bytes.Buffer
	if err := writeReport([]profile.Run{run}, outputFlags{jsonPath: "-", groupBy: "route"}, false, &stdout); err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	if top["version"] != "v9.9.9" || top["commit"] != "0123456789ab" {
		t.Errorf("JSON version %v, commit %v; want v9.9.9 and 0123456789ab", top["version"], top["commit"])
	}
}

// The demo's servers are named for what they are, not for the binary
// they are children of.
func TestDemoServerName(t *testing.T) {
	t.Setenv(asReqprof, "1")
	s, err := startDemoServer(demoServers[0].args)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "comm"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(comm)); got != demoServerName {
		t.Errorf("demo server's process name %q, want %q", got, demoServerName)
	}
	// Its threads too, which reports name where CPU went unattributed.
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(s.PID()), "task"))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "task", task.Name(), "comm"))
		if got := strings.TrimSpace(string(comm)); err == nil && got != demoServerName {
			t.Errorf("demo server's thread %s is named %q, want %q", task.Name(), got, demoServerName)
		}
	}
	if _, err := s.Stop(); err != nil {
		t.Errorf("stopping the demo server: %v", err)
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 requests", 1: "1 request", 2: "2 requests"} {
		if got := count(n, "request", "requests"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

// --pprof and --folded sample stacks without --stacks, at --stack-hz.
func TestStackOutputsImplyStacks(t *testing.T) {
	for _, args := range [][]string{{"--pprof", "run.pprof"}, {"--folded", "run.folded"}, {"--stacks"}} {
		c := newCommand("attach", "", "")
		var out outputFlags
		out.register(c, "")
		if err := c.parse(append(args, "--stack-hz", "499"), &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if err := out.validate(); err != nil {
			t.Fatal(err)
		}
		if cfg := out.config(nil, nil, nil); !cfg.Stacks || cfg.StackHz != 499 {
			t.Errorf("%q: stacks %v at %d Hz, want on at 499", args, cfg.Stacks, cfg.StackHz)
		}
	}
	var out outputFlags
	c := newCommand("attach", "", "")
	out.register(c, "")
	if err := c.parse(nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if out.validate(); out.config(nil, nil, nil).Stacks {
		t.Error("stacks on by default")
	}
}
