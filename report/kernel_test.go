package report

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

func TestBreakdownPerRequest(t *testing.T) {
	us, calls := breakdownPerRequest(map[profile.Cause]profile.KernelCost{
		{Kind: profile.CauseSyscall, Name: "write"}:  {Ns: 30_000, Calls: 4},
		{Kind: profile.CauseSyscall, Name: "mmap"}:   {Ns: 100, Calls: 1},
		{Kind: profile.CauseSoftirq, Name: "NET_RX"}: {Ns: 5_000},
		{Kind: profile.CauseSoftirq, Name: "TIMER"}:  {},
	}, 4)
	// 25 ns of mmap per request rounds to 0.0 µs, yet it is a cause.
	wantUs := map[string]float64{"syscall:write": 7.5, "syscall:mmap": 0, "softirq:NET_RX": 1.3}
	wantCalls := map[string]float64{"syscall:write": 1, "syscall:mmap": 0.25}
	if !reflect.DeepEqual(us, wantUs) || !reflect.DeepEqual(calls, wantCalls) {
		t.Errorf("got µs %v, calls %v; want %v, %v", us, calls, wantUs, wantCalls)
	}
	if us, calls := breakdownPerRequest(map[profile.Cause]profile.KernelCost{{Kind: profile.CauseIRQ}: {}}, 1); us != nil || calls != nil {
		t.Errorf("no time gave µs %v, calls %v; want nil maps, absent from the JSON", us, calls)
	}
}

// causesOf names kernelCosts' rows, with their µs.
func causesOf(rows []kernelCost) []string {
	var causes []string
	for _, r := range rows {
		causes = append(causes, fmt.Sprintf("%s %.1f", r.cause, r.us))
	}
	return causes
}

func TestKernelCostsFolding(t *testing.T) {
	// Twenty causes of 1 µs after one of 100 µs, and their calls.
	many := map[string]float64{"syscall:write": 100}
	manyCalls := map[string]float64{"syscall:write": 3}
	for i := range 20 {
		cause := fmt.Sprintf("syscall:s%02d", i)
		many[cause], manyCalls[cause] = 1, 0.5
	}
	cases := []struct {
		name      string
		us, calls map[string]float64
		all       bool
		want      []string
	}{
		{
			// 60 + 30 + 6 = 96% is enough: the last two fold.
			name: "covers 95%",
			us:   map[string]float64{"syscall:write": 60, "softirq:NET_RX": 30, "syscall:read": 6, "irq": 2, "syscall:mmap": 2},
			want: []string{"syscall:write 60.0", "softirq:NET_RX 30.0", "syscall:read 6.0", "(rest: 2 causes) 4.0"},
		},
		{
			name: "at most ten rows and the fold",
			us:   many, calls: manyCalls,
			want: []string{
				"syscall:write 100.0", "syscall:s00 1.0", "syscall:s01 1.0", "syscall:s02 1.0", "syscall:s03 1.0",
				"syscall:s04 1.0", "syscall:s05 1.0", "syscall:s06 1.0", "syscall:s07 1.0", "syscall:s08 1.0",
				"(rest: 11 causes) 11.0",
			},
		},
		{
			// Syscalls past a record's named slots and the folded tail
			// are two rows, named apart.
			name: "other syscalls and the rest",
			us:   map[string]float64{"syscall:write": 60, "syscall:other": 30, "syscall:read": 6, "irq": 2, "syscall:mmap": 2},
			want: []string{"syscall:write 60.0", "other syscalls 30.0", "syscall:read 6.0", "(rest: 2 causes) 4.0"},
		},
		{
			// Folding one cause would save no row.
			name: "one cause left over",
			us:   map[string]float64{"syscall:write": 96, "irq": 4},
			want: []string{"syscall:write 96.0", "irq 4.0"},
		},
		{
			// Ties go by name.
			name: "all",
			us:   map[string]float64{"syscall:write": 60, "syscall:read": 30, "irq": 5, "softirq:TIMER": 5},
			all:  true,
			want: []string{"syscall:write 60.0", "syscall:read 30.0", "irq 5.0", "softirq:TIMER 5.0"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, total := kernelCosts(TargetSummary{Requests: 1, KernelBreakdownUs: c.us, KernelBreakdownCalls: c.calls}, c.all)
			if got := causesOf(rows); !reflect.DeepEqual(got, c.want) {
				t.Errorf("rows %q\nwant %q", got, c.want)
			}
			var sum float64
			for _, us := range c.us {
				sum += us
			}
			if total != sum {
				t.Errorf("total %v, want every cause's µs, %v", total, sum)
			}
		})
	}
	t.Run("folded calls", func(t *testing.T) {
		rows, _ := kernelCosts(TargetSummary{Requests: 1, KernelBreakdownUs: many, KernelBreakdownCalls: manyCalls}, false)
		if folded := rows[len(rows)-1]; !folded.counted || folded.calls != 5.5 {
			t.Errorf("folded row %+v, want the 5.5 calls of its 11 syscalls", folded)
		}
		softirqs := map[string]float64{"syscall:write": 90, "softirq:NET_RX": 4, "softirq:TIMER": 3, "softirq:RCU": 3}
		rows, _ = kernelCosts(TargetSummary{Requests: 1, KernelBreakdownUs: softirqs}, false)
		if folded := rows[len(rows)-1]; folded.counted {
			t.Errorf("folded row %+v of softirqs only, want no calls counted", folded)
		}
	})
}

// A target with no finished request or no kernel time by cause has no
// kernel cost table.
func TestKernelCostCellsNone(t *testing.T) {
	for _, ts := range []TargetSummary{
		{Requests: 0, KernelBreakdownUs: map[string]float64{"irq": 1}},
		{Requests: 5},
		{Requests: 5, KernelBreakdownUs: map[string]float64{"syscall:mmap": 0}},
	} {
		if _, rows := kernelCostCells(ts, true); rows != nil {
			t.Errorf("%+v has kernel cost rows %q", ts, rows)
		}
	}
}
