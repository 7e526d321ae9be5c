package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"
)

// WriteJSON writes s as indented JSON with a trailing newline. The same
// Summary always gives the same bytes.
func WriteJSON(w io.Writer, s Summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Comm and labels are shown to people; \u003c for < helps no one.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("report: writing JSON: %w", err)
	}
	return nil
}

// Keys a summary must have to be read: those of the JSON contract other
// tools rely on. Keys added to it later are optional, and unknown keys are
// ignored, so an older reqprof can still read a newer one's summary. An
// optional key, when present, must have the keys its kind of value has.
var (
	requiredSummaryKeys = []string{"duration_s", "targets"}
	requiredTargetKeys  = []string{
		"pid", "comm", "requests", "cpu_us", "user_us", "kernel_us",
		"process_cpu_us", "attributed_cpu_us", "unattributed_cpu_us", "lost_events",
	}
	targetDistKeys         = []string{"cpu_us", "user_us", "kernel_us"}
	optionalTargetDistKeys = []string{"runqueue_us", "offcpu_us", "latency_us", "first_byte_us"}
	requiredDistKeys       = []string{"mean", "p50", "p90", "p99", "max"}
	requiredCtxSwitchKeys  = []string{"voluntary", "involuntary"}
	requiredRouteKeys      = []string{"route", "requests", "cpu_us", "user_us", "kernel_us", "latency_us"}
	requiredSourceKeys     = []string{"thread", "threads", "cpu_ms", "share"}
	routeDistKeys          = []string{"cpu_us", "user_us", "kernel_us", "latency_us"}
)

// ReadJSON reads a summary written by WriteJSON. It rejects anything that is
// not one JSON object of that shape: invalid JSON, trailing data, a value of
// the wrong type, a missing required key, a negative count or duration, a
// per-request figure no measurement can give, more requests sampled than
// finished, a histogram, routes or comparison that do not fit their
// targets (a histogram holds the requests sampled), or a started_at that
// is not RFC 3339. Its errors are one line for people, saying what is
// wrong in the terms of the file, not of Go.
func ReadJSON(r io.Reader) (Summary, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Summary{}, fmt.Errorf("reading it: %w", err)
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return Summary{}, describeJSONError(err, data)
	}
	if err := checkRequiredKeys(data); err != nil {
		return Summary{}, fmt.Errorf("not a reqprof run: %w", err)
	}
	if err := checkRanges(s); err != nil {
		return Summary{}, fmt.Errorf("invalid reqprof run: %w", err)
	}
	// Files written before commit was kept have the commit, if any, as
	// reqprof_version.
	if s.Commit == "" {
		s.Commit = s.ReqprofVersion
	}
	// Summarize never makes these nil, nor the optional ones empty (they
	// are absent instead); matching it keeps a summary equal to itself
	// after a write and a read.
	if s.Targets == nil {
		s.Targets = []TargetSummary{}
	}
	for i := range s.Targets {
		t := &s.Targets[i]
		if t.Warnings == nil {
			t.Warnings = []string{}
		}
		if len(t.KernelBreakdownUs) == 0 {
			t.KernelBreakdownUs = nil
		}
		if len(t.KernelBreakdownCalls) == 0 {
			t.KernelBreakdownCalls = nil
		}
		if len(t.Routes) == 0 {
			t.Routes = nil
		}
		if len(t.UnattributedSources) == 0 {
			t.UnattributedSources = nil
		}
	}
	if s.Comparison != nil && s.Comparison.Warnings == nil {
		s.Comparison.Warnings = []string{}
	}
	return s, nil
}

// describeJSONError says what err, from decoding data into a Summary,
// means for the file: cut short, not JSON, or JSON of another
// shape than a reqprof run's.
func describeJSONError(err error, data []byte) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return errors.New("empty: not a reqprof run")
	case errors.As(err, &syntax) && syntax.Error() == "unexpected end of JSON input":
		return fmt.Errorf("truncated: the JSON ends at byte %d before it is complete", len(data))
	case errors.As(err, &syntax):
		return fmt.Errorf("not JSON: %v, at byte %d", syntax, syntax.Offset)
	case errors.As(err, &typ):
		where := typ.Field
		if where == "" {
			return fmt.Errorf("not a reqprof run: a JSON %s, where a run is an object", typ.Value)
		}
		return fmt.Errorf("not a reqprof run: %s is a JSON %s, want %s", where, typ.Value, jsonKind(typ.Type))
	}
	return fmt.Errorf("not a reqprof run: %w", err)
}

// jsonKind names what JSON value decodes into t: "an object", "a list",
// "a whole number".
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another kind of value"
}

// checkRequiredKeys looks at data, already known to decode into a Summary,
// for the keys whose absence would otherwise read as a silent zero.
func checkRequiredKeys(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	if err := requireKeys(top, "the top level", requiredSummaryKeys); err != nil {
		return err
	}
	var targets []map[string]json.RawMessage
	if err := json.Unmarshal(top["targets"], &targets); err != nil {
		return err
	}
	for i, t := range targets {
		where := fmt.Sprintf("targets[%d]", i)
		if err := requireKeys(t, where, requiredTargetKeys); err != nil {
			return err
		}
		if err := requireObjectKeys(t, where, targetDistKeys, requiredDistKeys, false); err != nil {
			return err
		}
		if err := requireObjectKeys(t, where, optionalTargetDistKeys, requiredDistKeys, true); err != nil {
			return err
		}
		if err := requireObjectKeys(t, where, []string{"ctx_switches_per_request"}, requiredCtxSwitchKeys, true); err != nil {
			return err
		}
		if err := requireListKeys(t, where, "unattributed_sources", requiredSourceKeys); err != nil {
			return err
		}
		raw, ok := t["routes"]
		if !ok {
			continue
		}
		var routes []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &routes); err != nil {
			return err
		}
		for j, r := range routes {
			where := fmt.Sprintf("%s.routes[%d]", where, j)
			if err := requireKeys(r, where, requiredRouteKeys); err != nil {
				return err
			}
			if err := requireObjectKeys(r, where, routeDistKeys, requiredDistKeys, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// requireListKeys checks that each object of object's list at key, if it
// has one, has the keys required.
func requireListKeys(object map[string]json.RawMessage, where, key string, required []string) error {
	raw, ok := object[key]
	if !ok {
		return nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	for i, item := range list {
		if err := requireKeys(item, fmt.Sprintf("%s.%s[%d]", where, key, i), required); err != nil {
			return err
		}
	}
	return nil
}

// requireObjectKeys checks that each of object's values at keys is an
// object with the keys required. An optional key may be absent, or null,
// which reads as absent.
func requireObjectKeys(object map[string]json.RawMessage, where string, keys, required []string, optional bool) error {
	for _, key := range keys {
		raw, ok := object[key]
		if !ok && optional {
			continue
		}
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(raw, &inner); err != nil {
			return err
		}
		if inner == nil && optional {
			continue
		}
		if err := requireKeys(inner, where+"."+key, required); err != nil {
			return err
		}
	}
	return nil
}

func requireKeys(object map[string]json.RawMessage, where string, keys []string) error {
	if object == nil {
		return fmt.Errorf("%s is null, want an object", where)
	}
	for _, key := range keys {
		if _, ok := object[key]; !ok {
			return fmt.Errorf("%s has no %q", where, key)
		}
	}
	return nil
}

// maxPerRequestUs is 2^64 ns in µs, and maxPerRequestCount 2^64: no
// per-request figure reqprof measures can be larger. Bounding them keeps
// every sum, ratio and drawing made of them finite.
var (
	maxPerRequestUs    = math.Ldexp(1, 64) / 1000
	maxPerRequestCount = math.Ldexp(1, 64)
)

func checkRanges(s Summary) error {
	var errs []error
	if s.DurationS < 0 {
		errs = append(errs, fmt.Errorf("duration_s is %v, want >= 0", s.DurationS))
	}
	if o := s.Overhead; o != nil {
		figures := []struct {
			key   string
			value *float64
		}{
			{"bpf_ns_per_request", o.BPFNsPerRequest}, {"bpf_ns_per_run", o.BPFNsPerRun}, {"bpf_cpu_us", o.BPFCPUUs},
			{"bpf_stats_sampled_s", o.BPFStatsSampledS},
			{"collector_cpu_us", &o.CollectorCPUUs}, {"collector_max_rss_mb", &o.CollectorMaxRSSMB},
		}
		for _, f := range figures {
			if f.value != nil && *f.value < 0 {
				errs = append(errs, fmt.Errorf("overhead.%s is %v, want >= 0", f.key, *f.value))
			}
		}
	}
	if s.StartedAt != "" {
		if _, err := time.Parse(time.RFC3339, s.StartedAt); err != nil {
			errs = append(errs, fmt.Errorf("started_at: %w", err))
		}
	}
	for i, t := range s.Targets {
		errs = append(errs, checkTarget(t, fmt.Sprintf("targets[%d]", i))...)
	}
	if c := s.Comparison; c != nil {
		if len(c.Targets) != len(s.Targets) {
			errs = append(errs, fmt.Errorf("comparison has %d targets, the summary %d", len(c.Targets), len(s.Targets)))
		}
		if c.FloorIndex != nil && (*c.FloorIndex < 0 || *c.FloorIndex >= len(s.Targets)) {
			errs = append(errs, fmt.Errorf("comparison.floor_index is %d, not one of %d targets", *c.FloorIndex, len(s.Targets)))
		}
	}
	for i, ls := range s.Spread {
		if ls.Runs < 0 {
			errs = append(errs, fmt.Errorf("spread[%d].runs is %d, want >= 0", i, ls.Runs))
		}
	}
	return errors.Join(errs...)
}

func checkTarget(t TargetSummary, where string) []error {
	var errs []error
	counts := []struct {
		key string
		n   int
	}{
		{"requests", t.Requests},
		{"threads", t.Threads},
		{"unfinished_requests", t.UnfinishedRequests},
	}
	for _, c := range counts {
		if c.n < 0 {
			errs = append(errs, fmt.Errorf("%s.%s is %d, want >= 0", where, c.key, c.n))
		}
	}
	dists := []struct {
		key  string
		dist *Dist
	}{
		{"cpu_us", &t.CPUUs}, {"user_us", &t.UserUs}, {"kernel_us", &t.KernelUs},
		{"runqueue_us", t.RunqueueUs}, {"offcpu_us", t.OffCPUUs},
		{"latency_us", t.LatencyUs}, {"first_byte_us", t.FirstByteUs},
	}
	for _, d := range dists {
		if d.dist != nil {
			errs = append(errs, checkDist(*d.dist, where+"."+d.key))
		}
	}
	var switches []float64
	if c := t.CtxSwitchesPerRequest; c != nil {
		switches = []float64{c.Voluntary, c.Involuntary}
	}
	// Sorted, so that the figure an error names is the same every time.
	figures := []struct {
		key    string
		values []float64
		most   float64
	}{
		{"kernel_breakdown_us", slices.Sorted(maps.Values(t.KernelBreakdownUs)), maxPerRequestUs},
		{"kernel_breakdown_calls", slices.Sorted(maps.Values(t.KernelBreakdownCalls)), maxPerRequestCount},
		{"runqueue_total_us", optional(t.RunqueueTotalUs), math.MaxFloat64},
		{"offcpu_total_us", optional(t.OffCPUTotalUs), math.MaxFloat64},
		{"page_faults_per_request", optional(t.PageFaultsPerRequest), maxPerRequestCount},
		{"ctx_switches_per_request", switches, maxPerRequestCount},
	}
	for _, f := range figures {
		for _, x := range f.values {
			if x < 0 || x > f.most {
				errs = append(errs, fmt.Errorf("%s.%s has %v, want 0 to %v", where, f.key, x, f.most))
				break
			}
		}
	}
	for i, src := range t.UnattributedSources {
		where := fmt.Sprintf("%s.unattributed_sources[%d]", where, i)
		switch {
		case src.Threads < 0 || src.Names < 0:
			errs = append(errs, fmt.Errorf("%s counts %d threads of %d names, want >= 0", where, src.Threads, src.Names))
		case src.CPUMs < 0:
			errs = append(errs, fmt.Errorf("%s.cpu_ms is %v, want >= 0", where, src.CPUMs))
		case src.Share < 0 || src.Share > 1:
			errs = append(errs, fmt.Errorf("%s.share is %v, want 0 to 1", where, src.Share))
		}
	}
	if t.LostBreakdown != nil {
		var sum uint64
		for _, n := range t.LostBreakdown {
			sum += n
		}
		if sum != t.LostEvents {
			errs = append(errs, fmt.Errorf("%s.lost_breakdown adds up to %d, lost_events is %d", where, sum, t.LostEvents))
		}
	}
	// The histogram and the routes' samples hold the requests sampled:
	// every finished one, unless sampled_requests says how many.
	sampled, err := sampledOf(t.Requests, t.SampledRequests, where)
	if err != nil {
		return append(errs, err)
	}
	if t.CPUHistogram != nil {
		if err := checkHistogram(*t.CPUHistogram, sampled); err != nil {
			errs = append(errs, fmt.Errorf("%s.cpu_histogram: %w", where, err))
		}
	}
	if t.Routes != nil {
		errs = append(errs, checkRoutes(t.Routes, t.Requests, sampled, where+".routes")...)
	}
	return errs
}

// optional is the value p points to as a list of one, or none for nil.
func optional(p *float64) []float64 {
	if p == nil {
		return nil
	}
	return []float64{*p}
}

func checkDist(d Dist, where string) error {
	for _, x := range []float64{d.Mean, d.P50, d.P90, d.P99, d.Max} {
		if x < 0 || x > maxPerRequestUs {
			return fmt.Errorf("%s has %v, want 0 to %v", where, x, maxPerRequestUs)
		}
	}
	return nil
}

// checkRoutes checks that each route's figures are ones a measurement can
// give, that their requests add up to the target's, and their sampled
// requests (all of a route's, unless it says) to the target's, sampled.
func checkRoutes(routes []RouteSummary, requests, sampled int, where string) []error {
	var errs []error
	left, sampledLeft := requests, sampled
	for i, r := range routes {
		where := fmt.Sprintf("%s[%d]", where, i)
		// Subtracting, so that counts read from a file cannot overflow a sum.
		if r.Requests < 0 || r.Requests > left {
			errs = append(errs, fmt.Errorf("%s.requests is %d: requests must be >= 0 and add up to the target's, %d", where, r.Requests, requests))
			return errs
		}
		left -= r.Requests
		routeSampled, err := sampledOf(r.Requests, r.SampledRequests, where)
		if err != nil {
			return append(errs, err)
		}
		if routeSampled > sampledLeft {
			errs = append(errs, fmt.Errorf("%s: sampled requests add up to more than the target's, %d", where, sampled))
			return errs
		}
		sampledLeft -= routeSampled
		for _, d := range []struct {
			key  string
			dist Dist
		}{{"cpu_us", r.CPUUs}, {"user_us", r.UserUs}, {"kernel_us", r.KernelUs}, {"latency_us", r.LatencyUs}} {
			errs = append(errs, checkDist(d.dist, where+"."+d.key))
		}
	}
	if left != 0 {
		errs = append(errs, fmt.Errorf("%s: requests add up to %d, want the target's, %d", where, requests-left, requests))
	} else if sampledLeft != 0 {
		errs = append(errs, fmt.Errorf("%s: sampled requests add up to %d, want the target's, %d", where, sampled-sampledLeft, sampled))
	}
	return errs
}

// checkHistogram checks that h has a bucket, each between two edges that
// rise, and counts that add up to the target's requests (those sampled).
func checkHistogram(h Histogram, requests int) error {
	if len(h.Counts) == 0 || len(h.EdgesUs) != len(h.Counts)+1 {
		return fmt.Errorf("%d edges for %d counts, want one more edge than counts and a count at least", len(h.EdgesUs), len(h.Counts))
	}
	for i := 1; i < len(h.EdgesUs); i++ {
		if h.EdgesUs[i] <= h.EdgesUs[i-1] {
			return fmt.Errorf("edges_us[%d] is %v, not above the one before", i, h.EdgesUs[i])
		}
	}
	if h.EdgesUs[0] < 0 {
		return fmt.Errorf("edges_us[0] is %v, want >= 0", h.EdgesUs[0])
	}
	left := requests
	for i, n := range h.Counts {
		// Subtracting, so that counts read from a file cannot overflow a sum.
		if n < 0 || n > left {
			return fmt.Errorf("counts[%d] is %d: counts must be >= 0 and add up to requests, %d", i, n, requests)
		}
		left -= n
	}
	if left != 0 {
		return fmt.Errorf("counts add up to %d, want requests, %d", requests-left, requests)
	}
	return nil
}

// sampledOf is how many of requests a sample holds: all of them, unless
// sampled says how many, which must be 0 to requests.
func sampledOf(requests int, sampled *int, where string) (int, error) {
	if sampled == nil {
		return requests, nil
	}
	if *sampled < 0 || *sampled > requests {
		return 0, fmt.Errorf("%s.sampled_requests is %d, want 0 to requests, %d", where, *sampled, requests)
	}
	return *sampled, nil
}
