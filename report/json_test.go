package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const minimalSummary = `{"duration_s": 1, "targets": [{"pid": 1, "comm": "x", "requests": 0,
	"cpu_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
	"user_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
	"kernel_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
	"process_cpu_us": 0, "attributed_cpu_us": 0, "unattributed_cpu_us": 0, "lost_events": 0}]}`

func TestReadJSONRejects(t *testing.T) {
	cases := []struct {
		name, input, wantErr string
	}{
		{"empty", ``, "empty: not a reqprof run"},
		{"truncated", minimalSummary[:40], "truncated: the JSON ends at byte 40 before it is complete"},
		{"not JSON", `pid 4242 (uvicorn)`, "not JSON: invalid character 'p' looking for beginning of value, at byte 1"},
		{"array", `[1, 2]`, "not a reqprof run: a JSON array, where a run is an object"},
		{"null", `null`, "not a reqprof run: the top level is null"},
		{"no keys", `{}`, `not a reqprof run: the top level has no "duration_s"`},
		{"foreign object", `{"a": 1}`, `not a reqprof run: the top level has no "duration_s"`},
		{"trailing data", `{"duration_s": 1, "targets": []} {}`, "not JSON: invalid character '{' after top-level value"},
		{"string for number", `{"duration_s": "10", "targets": []}`, "not a reqprof run: duration_s is a JSON string, want a number"},
		{"fraction for count", strings.Replace(minimalSummary, `"requests": 0`, `"requests": 1.5`, 1), "not a reqprof run: targets.requests is a JSON number 1.5, want a whole number"},
		{"object for list", `{"duration_s": 1, "targets": {}}`, "not a reqprof run: targets is a JSON object, want a list"},
		{"null target", `{"duration_s": 1, "targets": [null]}`, "targets[0] is null"},
		{"missing pid", strings.Replace(minimalSummary, `"pid": 1,`, ``, 1), `targets[0] has no "pid"`},
		{"missing p99", strings.Replace(minimalSummary, `"p99": 0,`, ``, 1), `targets[0].cpu_us has no "p99"`},
		{"negative duration", strings.Replace(minimalSummary, `"duration_s": 1`, `"duration_s": -1`, 1), "duration_s is -1"},
		{"negative requests", strings.Replace(minimalSummary, `"requests": 0`, `"requests": -3`, 1), "targets[0].requests is -3"},
		{"negative lost events", strings.Replace(minimalSummary, `"lost_events": 0`, `"lost_events": -1`, 1), "not a reqprof run: targets.lost_events is a JSON number -1, want a whole number, 0 or more"},
		{"source without share", withSources(`{"thread": "gc", "threads": 1, "cpu_ms": 0.5}`), `targets[0].unattributed_sources[0] has no "share"`},
		{"null source", withSources(`null`), `targets[0].unattributed_sources[0] is null`},
		{"source share above 1", withSources(`{"thread": "gc", "threads": 1, "cpu_ms": 0.5, "share": 1.5}`), "unattributed_sources[0].share is 1.5"},
		{"negative source threads", withSources(`{"thread": "gc", "threads": -2, "cpu_ms": 0.5, "share": 1}`), "unattributed_sources[0] counts -2 threads"},
		{"negative source CPU", withSources(`{"thread": "gc", "threads": 1, "cpu_ms": -0.5, "share": 1}`), "unattributed_sources[0].cpu_ms is -0.5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadJSON(strings.NewReader(c.input))
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ReadJSON(%q) error %v, want one containing %q", c.input, err, c.wantErr)
			}
			// The error is for people: no Go package or type names.
			if err != nil && (strings.Contains(err.Error(), "report") || strings.Contains(err.Error(), "Go value")) {
				t.Errorf("ReadJSON(%q) error %q speaks of Go", c.input, err)
			}
		})
	}
}

// A run says which reqprof took it; one saved before "commit" was kept
// has its commit as reqprof_version, which reads as its commit.
func TestReadJSONVersion(t *testing.T) {
	withKeys := func(keys string) string {
		return strings.Replace(minimalSummary, `{"duration_s": 1,`, `{`+keys+` "duration_s": 1,`, 1)
	}
	for _, tc := range []struct {
		name, input             string
		wantVersion, wantCommit string
	}{
		{"this reqprof's", withKeys(`"version": "v1.0.0", "commit": "1a2b3c4d5e6f", "reqprof_version": "1a2b3c4d5e6f",`), "v1.0.0", "1a2b3c4d5e6f"},
		{"an older reqprof's", withKeys(`"reqprof_version": "451b82b04ab3",`), "", "451b82b04ab3"},
		{"unknown", minimalSummary, "", ""},
	} {
		s, err := ReadJSON(strings.NewReader(tc.input))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.Version != tc.wantVersion || s.Commit != tc.wantCommit {
			t.Errorf("%s: version %q, commit %q; want %q, %q", tc.name, s.Version, s.Commit, tc.wantVersion, tc.wantCommit)
		}
	}
}

// withSources is minimalSummary whose target has the unattributed sources
// given, as JSON.
func withSources(sources string) string {
	return strings.Replace(minimalSummary, `"pid": 1,`, `"pid": 1, "unattributed_sources": [`+sources+`],`, 1)
}

// A summary with only the contract's keys is read, and keys this reader does
// not know are ignored so that a newer reqprof's output still compares.
func TestReadJSONAccepts(t *testing.T) {
	withExtra := strings.Replace(minimalSummary, `"pid": 1,`, `"pid": 1, "added_later": [1, {"a": null}],`, 1)
	// Optional keys given as null or empty read as absent.
	withNothing := strings.Replace(minimalSummary, `"pid": 1,`, `"pid": 1, "latency_us": null,
		"ctx_switches_per_request": null, "kernel_breakdown_us": {}, "routes": [], "unattributed_sources": [],`, 1)
	for _, input := range []string{minimalSummary, withExtra, withNothing} {
		s, err := ReadJSON(strings.NewReader(input))
		if err != nil {
			t.Fatalf("ReadJSON(%q): %v", input, err)
		}
		want := Summary{DurationS: 1, Targets: []TargetSummary{{PID: 1, Comm: "x", Warnings: []string{}}}}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("ReadJSON(%q) = %+v, want %+v", input, s, want)
		}
	}
}

// FuzzReadJSON feeds ReadJSON arbitrary bytes: it must not panic, and what
// it accepts must survive a write and a read unchanged, render as a table,
// a comparison and a page, and compare with itself.
func FuzzReadJSON(f *testing.F) {
	goldens, err := filepath.Glob(filepath.Join("testdata", "*.json.golden"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range goldens {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(minimalSummary))
	f.Add([]byte(sampledSummary("4", `, "cpu_histogram": {"edges_us": [0, 1], "counts": [4]}`)))
	f.Add([]byte(`{"duration_s": 1, "targets": null}`))
	f.Add([]byte(`{"duration_s": 1e400, "targets": []}`))
	f.Add([]byte(`{"duration_s": 0, "targets": [], "PID": "x"}`))
	f.Add([]byte("pid 4242 \xff"))

	f.Fuzz(func(t *testing.T, data []byte) {
		first, err := ReadJSON(bytes.NewReader(data))
		if err != nil {
			return
		}
		var encoded bytes.Buffer
		if err := WriteJSON(&encoded, first); err != nil {
			t.Fatalf("WriteJSON of an accepted summary: %v", err)
		}
		second, err := ReadJSON(bytes.NewReader(encoded.Bytes()))
		if err != nil {
			t.Fatalf("ReadJSON rejects WriteJSON's output: %v\n%s", err, encoded.Bytes())
		}
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("summary changed on a write and a read:\nfirst  %+v\nsecond %+v", first, second)
		}
		if err := WriteTable(&bytes.Buffer{}, first); err != nil {
			t.Fatalf("WriteTable of an accepted summary: %v", err)
		}
		if err := WriteComparison(&bytes.Buffer{}, first, CompareOptions{}); err != nil {
			t.Fatalf("WriteComparison of an accepted summary: %v", err)
		}
		if err := WriteHTML(&bytes.Buffer{}, first); err != nil {
			t.Fatalf("WriteHTML of an accepted summary: %v", err)
		}
		// Compared with itself, with its last target as the floor, as
		// compare would: every figure must still be one JSON can hold.
		combined := Combine([]Source{{"a", first}, {"b", first}})
		if n := len(combined.Targets); n > 0 {
			if combined.Comparison, err = Compare(combined, CompareOptions{WithFloor: true, Floor: n - 1}); err != nil {
				t.Fatalf("Compare with a floor: %v", err)
			}
		}
		if err := WriteJSON(&bytes.Buffer{}, combined); err != nil {
			t.Fatalf("WriteJSON of an accepted summary combined with itself: %v", err)
		}
	})
}

// sampledSummary is minimalSummary with 10 requests of which 4 were
// sampled, its histogram and routes to be filled in.
func sampledSummary(sampled, rest string) string {
	return strings.Replace(minimalSummary, `"requests": 0`, `"requests": 10, "sampled_requests": `+sampled+rest, 1)
}

func TestReadJSONSampled(t *testing.T) {
	histogram := func(counts string) string {
		return `, "cpu_histogram": {"edges_us": [0, 1], "counts": [` + counts + `]}`
	}
	routes := `, "routes": [
		{"route": "a", "requests": 6, "sampled_requests": %s, "cpu_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
			"user_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}, "kernel_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
			"latency_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}},
		{"route": "b", "requests": 4, %s "cpu_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
			"user_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}, "kernel_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0},
			"latency_us": {"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}}]`
	rejects := []struct {
		name, input, wantErr string
	}{
		{"more sampled than requests", sampledSummary("11", ""), "targets[0].sampled_requests is 11, want 0 to requests, 10"},
		{"negative sampled", sampledSummary("-1", ""), "targets[0].sampled_requests is -1"},
		{"histogram of every request", sampledSummary("4", histogram("10")), "counts[0] is 10"},
		{"histogram of too few", sampledSummary("4", histogram("3")), "counts add up to 3, want requests, 4"},
		{"route sampled beyond its requests", sampledSummary("4", fmt.Sprintf(routes, "7", "")), "routes[0].sampled_requests is 7"},
		// Route b, with no sampled_requests, had all its 4 sampled.
		{"routes sampled beyond the target", sampledSummary("4", fmt.Sprintf(routes, "1", "")), "sampled requests add up to more than the target's, 4"},
		{"routes sampled short of the target", sampledSummary("4", fmt.Sprintf(routes, "1", `"sampled_requests": 2,`)), "sampled requests add up to 3, want the target's, 4"},
		{"route sampled in an unsampled target", strings.Replace(minimalSummary, `"requests": 0`, `"requests": 10`+fmt.Sprintf(routes, "3", ""), 1),
			"sampled requests add up to 7, want the target's, 10"},
	}
	for _, c := range rejects {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadJSON(strings.NewReader(c.input))
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ReadJSON(%q) error %v, want one containing %q", c.input, err, c.wantErr)
			}
		})
	}
	accepted := sampledSummary("4", histogram("4")+fmt.Sprintf(routes, "1", `"sampled_requests": 3,`))
	s, err := ReadJSON(strings.NewReader(accepted))
	if err != nil {
		t.Fatalf("ReadJSON(%q): %v", accepted, err)
	}
	if got := s.Targets[0]; got.SampledRequests == nil || *got.SampledRequests != 4 || *got.Routes[1].SampledRequests != 3 {
		t.Errorf("read %+v, want 4 sampled, 3 of route b", got)
	}
}
