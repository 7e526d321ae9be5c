package report

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
)

// LabelSpread is how far apart one target's mean CPU per request came out
// over the runs it appears in: the noise any difference between targets
// must stand out of.
type LabelSpread struct {
	// Target is the target's label, or "PID (comm)" without one, as the
	// comparison heads its column.
	Target string `json:"target"`
	// Runs is how many targets of that name with finished requests were
	// taken: one per run, unless a run had the name twice.
	Runs   int     `json:"runs"`
	MeanUs float64 `json:"mean_us"` // mean of the runs' means, unweighted
	MinUs  float64 `json:"min_us"`
	MaxUs  float64 `json:"max_us"`
	// RelativeSpread is (MaxUs - MinUs) / MeanUs, rounded to 0.001; 0 when
	// MeanUs is.
	RelativeSpread float64 `json:"relative_spread"`
}

// Spread gives, for every target name found with finished requests in two
// or more of runs, the spread of its mean CPU per request, in the order the
// names first appear. runs can be saved runs or repeats of one, such as
// attach --repeat takes.
func Spread(runs []Summary) []LabelSpread {
	var names []string
	means := map[string][]float64{}
	for _, r := range runs {
		for _, t := range r.Targets {
			if t.Requests == 0 {
				continue
			}
			name := columnName(t)
			if _, seen := means[name]; !seen {
				names = append(names, name)
			}
			means[name] = append(means[name], t.CPUUs.Mean)
		}
	}
	var spreads []LabelSpread
	for _, name := range names {
		m := means[name]
		if len(m) < 2 {
			continue
		}
		ls := LabelSpread{Target: name, Runs: len(m), MinUs: m[0], MaxUs: m[0]}
		var sum float64
		for _, x := range m {
			sum += x
			ls.MinUs = min(ls.MinUs, x)
			ls.MaxUs = max(ls.MaxUs, x)
		}
		ls.MeanUs = roundTenth(sum / float64(len(m)))
		if ls.MeanUs > 0 {
			ls.RelativeSpread = math.Round((ls.MaxUs-ls.MinUs)/ls.MeanUs*1000) / 1000
		}
		spreads = append(spreads, ls)
	}
	return spreads
}

// WriteSpread writes spreads for people, as a table with a row per target
// name.
func WriteSpread(w io.Writer, spreads []LabelSpread) error {
	var b bytes.Buffer
	if len(spreads) == 0 {
		b.WriteString("no target is in more than one run\n")
	} else {
		b.WriteString(spreadTitle + "\n")
		header, rows := spreadCells(spreads)
		if err := writeTextTable(&b, header, rows, numbersAlign(len(header))); err != nil {
			return err
		}
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("report: writing spread: %w", err)
	}
	return nil
}

const spreadTitle = "run-to-run spread of mean CPU µs per request"

// spreadCells lays out spreads as the cells of a table with a row per
// target name, for the terminal and the page alike.
func spreadCells(spreads []LabelSpread) (header []string, rows [][]string) {
	for _, ls := range spreads {
		rows = append(rows, []string{
			ls.Target, strconv.Itoa(ls.Runs), tenths(ls.MeanUs),
			tenths(ls.MinUs) + " .. " + tenths(ls.MaxUs),
			strconv.FormatFloat(100*ls.RelativeSpread, 'f', 1, 64) + "%",
		})
	}
	return []string{"target", "runs", "mean", "min .. max", "spread"}, rows
}
