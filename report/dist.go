package report

import (
	"math"
	"slices"
)

// Dist summarises one per-request quantity, in µs rounded to 0.1 µs.
//
// Percentiles are computed with the nearest-rank method: the p-th
// percentile of N sorted values is the value at 1-based rank
// ceil(p/100 × N). It is always one of the observed values, never an
// interpolation between two, so a p99 is a request that really happened.
// They are exact when every request was kept, and of a uniform sample of
// the requests when the collector kept one (TargetSummary.SampledRequests
// says so); the mean and max are exact either way.
type Dist struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// NewDist summarises values given in ns. No values gives the zero Dist.
func NewDist(valuesNs []uint64) Dist {
	var sum, most uint64
	for _, v := range valuesNs {
		sum += v
		most = max(most, v)
	}
	return sampledDist(valuesNs, sum, len(valuesNs), most)
}

// sampledDist summarises count values given in ns, of which sampleNs are a
// uniform sample (or all): the mean and max come from their exact sum and
// largest, the percentiles from the sample. No sample gives percentiles of
// 0, and no values the zero Dist.
func sampledDist(sampleNs []uint64, sumNs uint64, count int, maxNs uint64) Dist {
	if count == 0 {
		return Dist{}
	}
	d := Dist{
		Mean: roundTenth(float64(sumNs) / float64(count) / 1000),
		Max:  usFromNs(maxNs),
	}
	if len(sampleNs) > 0 {
		sorted := slices.Clone(sampleNs)
		slices.Sort(sorted)
		d.P50 = usFromNs(nearestRank(sorted, 50))
		d.P90 = usFromNs(nearestRank(sorted, 90))
		d.P99 = usFromNs(nearestRank(sorted, 99))
	}
	return d
}

// nearestRank is the percent-th percentile (1 <= percent <= 100) of sorted,
// which must not be empty. The rank is computed in integers so that, say,
// p90 of 10 values is exactly rank 9, not rank 10 from a float that came
// out as 9.000000000000002.
func nearestRank(sorted []uint64, percent int) uint64 {
	rank := (percent*len(sorted) + 99) / 100 // ceil(percent × N / 100)
	return sorted[rank-1]
}

// usFromNs converts ns to µs rounded half up to 0.1 µs. Dividing an integer
// count of tenths by 10 gives the float64 nearest that decimal, which JSON
// then prints without a trailing ...0000001.
func usFromNs(ns uint64) float64 {
	return float64((ns+50)/100) / 10
}

// perRequestUs is sumNs shared over count requests, in µs to a tenth; 0
// for no request.
func perRequestUs(sumNs uint64, count int) float64 {
	if count == 0 {
		return 0
	}
	return roundTenth(float64(sumNs) / float64(count) / 1000)
}

// roundTenth rounds to one decimal place, for the same clean printing as
// usFromNs.
func roundTenth(x float64) float64 {
	return math.Round(x*10) / 10
}
