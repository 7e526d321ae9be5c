package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// ignored, so an older reqprof can still read a newer one's summary.
var (
	requiredSummaryKeys = []string{"duration_s", "targets"}
	requiredTargetKeys  = []string{
		"pid", "comm", "requests", "cpu_us", "user_us", "kernel_us",
		"process_cpu_us", "attributed_cpu_us", "unattributed_cpu_us", "lost_events",
	}
	targetDistKeys   = []string{"cpu_us", "user_us", "kernel_us"}
	requiredDistKeys = []string{"mean", "p50", "p90", "p99", "max"}
)

// ReadJSON reads a summary written by WriteJSON. It rejects anything that is
// not one JSON object of that shape: invalid JSON, trailing data, a value of
// the wrong type, a missing required key, or a negative count or duration.
func ReadJSON(r io.Reader) (Summary, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Summary{}, fmt.Errorf("report: reading summary: %w", err)
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return Summary{}, fmt.Errorf("report: not a reqprof summary: %w", err)
	}
	if err := checkRequiredKeys(data); err != nil {
		return Summary{}, fmt.Errorf("report: not a reqprof summary: %w", err)
	}
	if err := checkRanges(s); err != nil {
		return Summary{}, fmt.Errorf("report: invalid reqprof summary: %w", err)
	}
	// Summarize never makes these nil; matching it keeps a summary equal to
	// itself after a write and a read.
	if s.Targets == nil {
		s.Targets = []TargetSummary{}
	}
	for i := range s.Targets {
		if s.Targets[i].Warnings == nil {
			s.Targets[i].Warnings = []string{}
		}
	}
	return s, nil
}

// checkRequiredKeys looks at data, already known to decode into a Summary,
// for the keys whose absence would otherwise read as a silent zero.
func checkRequiredKeys(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	if err := requireKeys(top, "summary", requiredSummaryKeys); err != nil {
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
		for _, key := range targetDistKeys {
			var dist map[string]json.RawMessage
			if err := json.Unmarshal(t[key], &dist); err != nil {
				return err
			}
			if err := requireKeys(dist, where+"."+key, requiredDistKeys); err != nil {
				return err
			}
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

func checkRanges(s Summary) error {
	var errs []error
	if s.DurationS < 0 {
		errs = append(errs, fmt.Errorf("duration_s is %v, want >= 0", s.DurationS))
	}
	for i, t := range s.Targets {
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
				errs = append(errs, fmt.Errorf("targets[%d].%s is %d, want >= 0", i, c.key, c.n))
			}
		}
	}
	return errors.Join(errs...)
}
