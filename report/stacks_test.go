package report

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pprof "github.com/google/pprof/profile"

	"github.com/reqprof/reqprof/profile"
)

// stacksOfOneTarget are samples of oneTargetRun's routes: GET /users/{id}
// in handler.get and its JSON encoding, POST /users in handler.post and the
// kernel's write path, a thread serving no request in a GC loop, and a
// request that did not finish; one frame of a binary without symbols.
func stacksOfOneTarget() *profile.Stacks {
	frames := []profile.Frame{
		{Function: "main", Module: "/srv/app", Address: 0x401000, ModuleAddress: 0x401000, MappingStart: 0x400000, MappingLimit: 0x500000, BuildID: "ab12"},
		{Function: "github.com/acme/app/handler.get", File: "handler.go", Line: 10, Module: "/srv/app", Address: 0x402000, ModuleAddress: 0x402000, MappingStart: 0x400000, MappingLimit: 0x500000, BuildID: "ab12"},
		{Function: "encoding/json.Marshal", File: "encode.go", Line: 160, Module: "/srv/app", Address: 0x403000, ModuleAddress: 0x403000, MappingStart: 0x400000, MappingLimit: 0x500000, BuildID: "ab12"},
		{Function: "github.com/acme/app/handler.post", File: "handler.go", Line: 30, Module: "/srv/app", Address: 0x404000, ModuleAddress: 0x404000, MappingStart: 0x400000, MappingLimit: 0x500000, BuildID: "ab12"},
		{Function: "syscall.write", Module: "/srv/app", Address: 0x405000, ModuleAddress: 0x405000, MappingStart: 0x400000, MappingLimit: 0x500000, BuildID: "ab12"},
		{Function: "tcp_sendmsg", Module: profile.KernelModule, Address: 0xffffffff81001000, Kernel: true},
		{Function: "entry_SYSCALL_64", Module: profile.KernelModule, Address: 0xffffffff81000100, Kernel: true},
		{Function: "runtime.gcBgMarkWorker", Module: "/srv/app", Address: 0x406000, ModuleAddress: 0x406000, MappingStart: 0x400000, MappingLimit: 0x500000, BuildID: "ab12"},
		{Module: "/usr/lib/libz.so.1", Address: 0x7f0000001234, ModuleAddress: 0x1234, MappingStart: 0x7f0000000000, MappingLimit: 0x7f0000100000},
	}
	users := profile.RouteKey{Route: "GET /users/{id}", Port: 8000}
	post := profile.RouteKey{Route: "POST /users", Port: 8000}
	return &profile.Stacks{
		Hz: 999, PeriodNs: 1_001_001, Frames: frames,
		Samples: []profile.StackSample{
			{Route: users, Frames: []int32{2, 1, 0}, Count: 60},
			{Route: users, Frames: []int32{1, 0}, Count: 30},
			{Route: users, Frames: []int32{8, 2, 1, 0}, Count: 10},
			{Route: post, Frames: []int32{3, 0}, Count: 20},
			{Route: post, Kernel: true, Frames: []int32{5, 6, 4, 3, 0}, Count: 20},
			{Route: profile.RouteKey{Route: "GET /health", Port: 9090}, Frames: []int32{0}, Count: 3},
			{Route: profile.RouteKey{Route: profile.BetweenRequests}, Frames: []int32{7}, Count: 8},
			{Route: profile.RouteKey{Route: profile.UnfinishedRequest}, Frames: []int32{1, 0}, Count: 2},
		},
		Notes: []string{"/usr/lib/libz.so.1: no symbols (no .symtab or .dynsym, no pclntab, no debug file by build id or debuglink); its frames are addresses"},
		Lost:  map[string]uint64{"ring_buffer": 4},
	}
}

func stacksRun() profile.Run {
	run := oneTargetRun()
	run.Targets[0].Stacks = stacksOfOneTarget()
	return run
}

// The hot functions of a route are its samples' shares valued at its
// mean CPU per request: GET /users/{id} costs 100.5 µs a request on
// average, of which encoding/json.Marshal is sampled in 60 of its 100
// samples, so 60.3 µs.
func TestRouteHotFunctions(t *testing.T) {
	s := Summarize(stacksRun())
	st := s.Targets[0].Stacks
	if st == nil || st.Samples != 153 || st.Hz != 999 {
		t.Fatalf("stacks %+v", st)
	}
	var users RouteStacks
	for _, r := range st.Routes {
		if r.Route == "GET /users/{id}" {
			users = r
		}
	}
	if users.Samples != 100 || users.CPUUsPerRequest == nil {
		t.Fatalf("route %+v", users)
	}
	mean := *users.CPUUsPerRequest
	want := []HotFunction{
		{Function: "encoding/json.Marshal", Module: "/srv/app", Self: roundTenth(0.6 * mean), Total: roundTenth(0.7 * mean), SelfShare: 0.6, TotalShare: 0.7},
		{Function: "github.com/acme/app/handler.get", Module: "/srv/app", Self: roundTenth(0.3 * mean), Total: mean, SelfShare: 0.3, TotalShare: 1},
		{Function: "libz.so.1+0x1234", Module: "/usr/lib/libz.so.1", Self: roundTenth(0.1 * mean), Total: roundTenth(0.1 * mean), SelfShare: 0.1, TotalShare: 0.1},
	}
	if len(users.Functions) != len(want) {
		t.Fatalf("functions %+v, want %+v", users.Functions, want)
	}
	for i := range want {
		if users.Functions[i] != want[i] {
			t.Errorf("function %d: %+v, want %+v", i, users.Functions[i], want[i])
		}
	}
	last := st.Routes[len(st.Routes)-2:]
	if last[0].Route != profile.BetweenRequests || last[1].Route != profile.UnfinishedRequest || last[0].CPUMs == nil || *last[0].CPUMs != 8.0 {
		t.Errorf("routes of no request %+v", last)
	}
}

// One pprof profile holds every sample, labelled so that -tagfocus picks
// a route, with CPU at the sampling period.
func TestPprof(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePprof(&buf, []profile.Run{stacksRun()}, GroupByRoute); err != nil {
		t.Fatal(err)
	}
	raw := bytes.Clone(buf.Bytes())
	p, err := pprof.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if p.Period != 1_001_001 || len(p.SampleType) != 2 || p.SampleType[1].Unit != "nanoseconds" {
		t.Errorf("period %d, types %v", p.Period, p.SampleType)
	}
	byRoute := map[string]int64{}
	for _, s := range p.Sample {
		if s.Label["target"][0] != "uvicorn (4242)" {
			t.Errorf("target label %v", s.Label["target"])
		}
		byRoute[s.Label["route"][0]+" "+s.Label["mode"][0]] += s.Value[0]
		if s.Value[1] != s.Value[0]*1_001_001 {
			t.Errorf("values %v", s.Value)
		}
	}
	want := map[string]int64{"GET /users/{id} user": 100, "POST /users user": 20, "POST /users kernel": 20, "GET /health user": 3,
		profile.BetweenRequests + " user": 8, profile.UnfinishedRequest + " user": 2}
	if !equalMaps(byRoute, want) {
		t.Errorf("samples by route and mode %v, want %v", byRoute, want)
	}
	// go tool pprof -tagfocus route=... shows that route's samples only.
	path := filepath.Join(t.TempDir(), "run.pprof")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-tagfocus", "route=POST /users", path).CombinedOutput()
	if err != nil {
		t.Skipf("go tool pprof: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "handler.post") || strings.Contains(string(out), "handler.get") {
		t.Errorf("-tagfocus route=POST /users shows:\n%s", out)
	}
	if len(p.Comments) != 1 || !strings.Contains(p.Comments[0], "libz") {
		t.Errorf("comments %q", p.Comments)
	}
	if err := WritePprof(&buf, []profile.Run{oneTargetRun()}, GroupByRoute); err == nil {
		t.Error("a run without samples wrote a profile")
	}
}

func equalMaps[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Folded stacks have the route as their root frame, then the target's
// frames from the root, kernel frames marked; with two targets, each
// target's name comes first.
func TestFolded(t *testing.T) {
	var one, two bytes.Buffer
	if err := WriteFolded(&one, []profile.Run{stacksRun()}, GroupByRoute); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "stacks.folded.golden", one.Bytes())
	run := stacksRun()
	second := run.Targets[0]
	second.PID, second.Label = 4343, "canary"
	run.Targets = append(run.Targets, second)
	if err := WriteFolded(&two, []profile.Run{run}, GroupByPort); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "stacks_two_targets_by_port.folded.golden", two.Bytes())
}

// stacksComparison is two targets with stack samples, the second's JSON
// encoding grown (60 samples to 180) and its handler's own time shrunk (30
// to 10), for the differential flame graph.
func stacksComparison() Summary {
	run := stacksRun()
	second := run.Targets[0]
	second.PID, second.Label = 4343, "canary"
	st := *second.Stacks
	st.Samples = slices.Clone(st.Samples)
	st.Samples[0].Count = 180
	st.Samples[1].Count = 10
	second.Stacks = &st
	run.Targets[0].Label = "stable"
	run.Targets = append(run.Targets, second)
	return Summarize(run)
}

var framePattern = regexp.MustCompile(`<rect class="frame" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)" height="[0-9.]+" fill="(#[0-9a-f]{6})"><title>([^<]*)</title>`)

// The page draws a flame graph per route with samples, the route at its
// root, each box as wide as its share; and a differential one of the
// second target against the first, coloured by how each share changed.
func TestHTMLFlameGraphs(t *testing.T) {
	s := stacksComparison()
	var b bytes.Buffer
	if err := WriteHTML(&b, s); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	boxes := framePattern.FindAllStringSubmatch(page, -1)
	if len(boxes) == 0 {
		t.Fatal("no flame graph boxes")
	}
	widths := map[string]string{}
	colours := map[string]string{}
	for _, box := range boxes {
		widths[box[3]] = box[1]
		colours[box[3]] = box[2]
	}
	// GET /users/{id} has 100 samples of the first target: the route's
	// box is the chart's whole width (flameWidth, less a 0.5 px gap),
	// json.Marshal's 70% of it.
	for title, want := range map[string]string{
		"GET /users/{id}: 99.2 µs per request, 100.0% of the route&#39;s samples (100)":     "1199.5",
		"encoding/json.Marshal: 69.4 µs per request, 70.0% of the route&#39;s samples (70)": "839.5",
		"tcp_sendmsg (kernel): 51.0 µs per request, 50.0% of the route&#39;s samples (20)":  "599.5",
		"(between requests): 8.0 ms of CPU, 100.0% of these samples (8)":                    "1199.5",
		// canary: 243 samples of finished requests, 190 in json.Marshal;
		// stable: 143, 70.
		"encoding/json.Marshal: 78.2% of canary&#39;s samples (190), 49.0% of stable&#39;s": "937.8",
		"POST /users: 16.5% of canary&#39;s samples (40), 28.0% of stable&#39;s":            "197.0",
	} {
		got, ok := widths[title]
		if !ok {
			t.Errorf("no box titled %q", title)
			continue
		}
		if want != "" && got != want {
			t.Errorf("box %q is %s px wide, want %s", title, got, want)
		}
	}
	if c := colours["encoding/json.Marshal: 78.2% of canary&#39;s samples (190), 49.0% of stable&#39;s"]; c != flameGrew[len(flameGrew)-1] {
		t.Errorf("the share that grew most is %s, want %s", c, flameGrew[len(flameGrew)-1])
	}
	if c := colours["POST /users: 16.5% of canary&#39;s samples (40), 28.0% of stable&#39;s"]; !slices.Contains(flameFell, c) {
		t.Errorf("a share that fell is %s, want one of %v", c, flameFell)
	}
	if n := strings.Count(page, `<h2 class="chart-title">Differential flame graph</h2>`); n != 1 {
		t.Errorf("%d differential flame graphs, want 1", n)
	}
	// Both targets: 3 routes and the 2 of no finished request each.
	if n := strings.Count(page, `<section class="flame">`); n != 10 {
		t.Errorf("%d flame graphs, want 10", n)
	}
}

// pythonSDKStacks are the samples of a Python server's two routes, GET
// /light in light_work and GET /heavy in heavy_work (each sampled at two
// of its lines), spliced in place of the interpreter's evaluation loop
// under its native frames: heavy of /heavy's 100 samples in heavy_work.
func pythonSDKStacks(heavy uint64) *profile.Stacks {
	py := func(fn string, first, line int) profile.Frame {
		return profile.Frame{Function: fn, File: "/srv/app/routes.py", Line: line, FunctionLine: first, Module: profile.PythonModule, Address: 0x7f0000100000 + uint64(first)}
	}
	frames := []profile.Frame{
		{Function: "main", Module: "/usr/bin/python3.11", Address: 0x401000, ModuleAddress: 0x401000, MappingStart: 0x400000, MappingLimit: 0x900000},
		py("Handler.do_GET", 40, 43),
		py("light_work", 28, 29),
		py("light_work", 28, 30),
		py("heavy_work", 32, 33),
		py("heavy_work", 32, 34),
		{Function: "PyObject_Free", Module: "/usr/bin/python3.11", Address: 0x402000, ModuleAddress: 0x402000, MappingStart: 0x400000, MappingLimit: 0x900000},
	}
	light := profile.RouteKey{Route: "GET /light", Port: 8000}
	heavyRoute := profile.RouteKey{Route: "GET /heavy", Port: 8000}
	return &profile.Stacks{
		Hz: 999, PeriodNs: 1_001_001, Frames: frames,
		Samples: []profile.StackSample{
			{Route: light, Frames: []int32{2, 1, 0}, Count: 60},
			{Route: light, Frames: []int32{6, 3, 1, 0}, Count: 40},
			{Route: heavyRoute, Frames: []int32{4, 1, 0}, Count: heavy / 2},
			{Route: heavyRoute, Frames: []int32{5, 1, 0}, Count: heavy - heavy/2},
			{Route: heavyRoute, Frames: []int32{1, 0}, Count: 100 - heavy},
		},
	}
}

// Interpreted frames are named by their function, file and first line
// (one row, one flame box, however many of its lines were sampled); pprof
// has them as functions with their file and first line, each sample at its
// line, in no mapping; and the differential flame graph of two SDKs shows
// the Python function one spends more in.
func TestInterpretedFrames(t *testing.T) {
	var requests []profile.Request
	for i := range 20 {
		route, ns := "GET /light", uint64(2_000_000)
		if i%2 == 1 {
			route, ns = "GET /heavy", 4_000_000
		}
		requests = append(requests, profile.Request{Route: route, Port: 8000, End: 5 * time.Millisecond, UserNs: ns})
	}
	a := profile.Target{PID: 4242, Comm: "python3", Label: "sdk-a", Requests: requests, Stacks: pythonSDKStacks(60)}
	b := a
	b.Label, b.PID, b.Stacks = "sdk-b", 4343, pythonSDKStacks(90)
	run := profile.Run{Duration: time.Second, Targets: []profile.Target{a, b}}
	s := Summarize(run)
	var heavy RouteStacks
	for _, r := range s.Targets[0].Stacks.Routes {
		if r.Route == "GET /heavy" {
			heavy = r
		}
	}
	if len(heavy.Functions) == 0 || heavy.Functions[0].Function != "heavy_work (routes.py:32)" || heavy.Functions[0].Module != profile.PythonModule || heavy.Functions[0].SelfShare != 0.6 {
		t.Errorf("GET /heavy's hottest functions %+v, want heavy_work (routes.py:32) in [python], 60%% of its samples", heavy.Functions)
	}
	var table bytes.Buffer
	if err := writeStacks(&table, s.Targets[0].Stacks, false); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`│ heavy_work \(routes\.py:32\) +│ +\[python\] │`).MatchString(table.String()) {
		t.Errorf("the table does not show heavy_work in [python]:\n%s", table.String())
	}

	var folded bytes.Buffer
	if err := WriteFolded(&folded, []profile.Run{run}, GroupByRoute); err != nil {
		t.Fatal(err)
	}
	if want := "sdk-b;GET /heavy;main;Handler.do_GET (routes.py:40);heavy_work (routes.py:32) 90\n"; !strings.Contains(folded.String(), want) {
		t.Errorf("folded stacks:\n%s\nwant a line %q", folded.String(), want)
	}

	var raw bytes.Buffer
	if err := WritePprof(&raw, []profile.Run{run}, GroupByRoute); err != nil {
		t.Fatal(err)
	}
	p, err := pprof.Parse(&raw)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[int64]bool{}
	for _, loc := range p.Location {
		fn := loc.Line[0].Function
		if fn.Name != "heavy_work" {
			continue
		}
		if fn.Filename != "/srv/app/routes.py" || fn.StartLine != 32 || loc.Mapping != nil {
			t.Errorf("heavy_work in pprof: %+v, mapping %v", fn, loc.Mapping)
		}
		lines[loc.Line[0].Line] = true
	}
	if !lines[33] || !lines[34] || len(lines) != 2 {
		t.Errorf("heavy_work's locations are at lines %v, want 33 and 34", lines)
	}

	var page bytes.Buffer
	if err := WriteHTML(&page, s); err != nil {
		t.Fatal(err)
	}
	// sdk-b: 200 samples of finished requests, 90 in heavy_work; sdk-a:
	// 60 of 200.
	const title = "heavy_work (routes.py:32): 45.0% of sdk-b&#39;s samples (90), 30.0% of sdk-a&#39;s"
	found := false
	for _, box := range framePattern.FindAllStringSubmatch(page.String(), -1) {
		if box[3] == title {
			found = true
			if box[2] != flameGrew[len(flameGrew)-1] {
				t.Errorf("heavy_work, which grew most, is %s, want %s", box[2], flameGrew[len(flameGrew)-1])
			}
		}
	}
	if !found {
		t.Errorf("no box titled %q in the differential flame graph", title)
	}
}

// Labels are drawn light on the differential graph's two darkest fills
// only: every other fill is light enough for dark text.
func TestDarkFlameColours(t *testing.T) {
	dark := map[string]bool{flameGrew[len(flameGrew)-1]: true, flameFell[len(flameFell)-1]: true}
	var all []string
	all = append(all, flameRootColor, flameEqual)
	all = append(all, flameUserColors...)
	all = append(all, flameKernelColors...)
	all = append(all, flameGrew...)
	all = append(all, flameFell...)
	for _, c := range all {
		if darkColor(c) != dark[c] {
			t.Errorf("%s: dark %v, want %v", c, darkColor(c), dark[c])
		}
	}
}

// Figures net of reqprof's own cost value the samples at a mean cpu that
// leaves its programs out, while the samples catch them: the title says
// so, and only then.
func TestStacksTitleSaysOwnProgramsAreSampled(t *testing.T) {
	st := &StacksSummary{Samples: 10, Hz: 999}
	const note = "the samples catch reqprof's own programs too (bpf_ frames), which the mean cpu leaves out"
	if title := stacksTitle(st, true); !strings.HasSuffix(title, "; "+note) {
		t.Errorf("net figures: title %q lacks %q", title, note)
	}
	if title := stacksTitle(st, false); strings.Contains(title, "bpf_") {
		t.Errorf("gross figures: title %q speaks of the own programs", title)
	}
}
