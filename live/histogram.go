package live

import (
	"math"
	"sort"
)

// ClassicBoundsNs are the upper bounds, in ns, of the classic buckets of
// every histogram: 1 µs to 1 s in steps of 1, 2, 5, which a scrape of
// the text format shows as le="1e-06" ... le="1", then +Inf. They are
// coarse on purpose, 20 series per histogram; the native buckets below
// are fine-grained for who can read them.
var ClassicBoundsNs = [...]uint64{
	1e3, 2e3, 5e3,
	1e4, 2e4, 5e4,
	1e5, 2e5, 5e5,
	1e6, 2e6, 5e6,
	1e7, 2e7, 5e7,
	1e8, 2e8, 5e8,
	1e9,
}

// NativeSchema is the schema of the native (exponential) buckets, as
// Prometheus numbers them: each bucket is 2^(2^-3), about 9%, wider than
// the one below it, so a quantile read from them is within a bucket's
// width of the true one, 9% at worst.
const NativeSchema = 3

// nativeBounds are the upper bounds of a power of two's 8 buckets, as
// fractions of it: Prometheus's own table for schema 3, so that a value
// falls in the bucket Prometheus's client would put it in.
var nativeBounds = [1 << NativeSchema]float64{
	0.5, 0.5452538663326288, 0.5946035575013605, 0.6484197773255048,
	0.7071067811865475, 0.7711054127039704, 0.8408964152537144, 0.9170040432046711,
}

// The native keys kept: 1 ns (2^-29.9 s, key -239) up to 2^20 s (about
// 12 days, key 160). A value past either end is counted at it; a request
// takes no less than a ns, and one that lasts past 12 days is a stream,
// not a request.
const (
	minNativeKey = -240
	maxNativeKey = 160
	nativeKeys   = maxNativeKey - minNativeKey + 1
)

// Histogram counts values in ns, in classic and in native buckets, with
// their sum. It is written by one goroutine and copied out under its
// owner's lock; its zero value is empty.
type Histogram struct {
	Count uint64
	SumNs uint64
	// Classic counts each classic bucket's values on its own (not
	// cumulated): Classic[i] those above ClassicBoundsNs[i-1] up to
	// ClassicBoundsNs[i]; the last, those above 1 s.
	Classic [len(ClassicBoundsNs) + 1]uint64
	// Zero counts the values of 0 ns, Prometheus's zero bucket.
	Zero uint64
	// native[k-minNativeKey] counts native bucket k's values; lo and hi
	// bound the keys counted so far, so that a copy takes only them.
	native [nativeKeys]uint64
	lo, hi int
}

// Observe counts one value. It allocates nothing and costs a few ns: a
// short scan of the classic bounds and a frexp.
func (h *Histogram) Observe(ns uint64) {
	h.Count++
	h.SumNs += ns
	i := 0
	for i < len(ClassicBoundsNs) && ns > ClassicBoundsNs[i] {
		i++
	}
	h.Classic[i]++
	if ns == 0 {
		h.Zero++
		return
	}
	k := nativeKey(ns) - minNativeKey
	h.native[k]++
	if h.Count-h.Zero == 1 {
		h.lo, h.hi = k, k
		return
	}
	h.lo, h.hi = min(h.lo, k), max(h.hi, k)
}

// nativeKey is the native bucket of ns (> 0): key k holds the values
// above 2^((k-1)/8) s up to 2^(k/8) s, as Prometheus's client computes it.
func nativeKey(ns uint64) int {
	frac, exp := math.Frexp(float64(ns) * 1e-9)
	k := sort.SearchFloat64s(nativeBounds[:], frac) + (exp-1)*len(nativeBounds)
	return min(max(k, minNativeKey), maxNativeKey)
}

// NativeUpperSeconds is native bucket k's upper bound, in seconds.
func NativeUpperSeconds(k int) float64 {
	return math.Exp2(float64(k) / (1 << NativeSchema))
}

// Buckets is a histogram as it is read: copied out, subtracted, summed.
type Buckets struct {
	Count   uint64
	SumNs   uint64
	Classic [len(ClassicBoundsNs) + 1]uint64
	Zero    uint64
	// Native holds the counts of native keys NativeLow, NativeLow+1, ...
	NativeLow int
	Native    []uint64
}

// copyTo copies h into b, reusing b's native slice.
func (h *Histogram) copyTo(b *Buckets) {
	b.Count, b.SumNs, b.Classic, b.Zero = h.Count, h.SumNs, h.Classic, h.Zero
	b.Native = b.Native[:0]
	if h.Count == h.Zero {
		b.NativeLow = 0
		return
	}
	b.NativeLow = h.lo + minNativeKey
	b.Native = append(b.Native, h.native[h.lo:h.hi+1]...)
}

// Add adds o's counts to b.
func (b *Buckets) Add(o Buckets) {
	b.Count += o.Count
	b.SumNs += o.SumNs
	b.Zero += o.Zero
	for i := range b.Classic {
		b.Classic[i] += o.Classic[i]
	}
	b.combineNative(o, 1)
}

// Sub is b less an earlier reading of the same histogram, prev: what was
// counted in between.
func (b Buckets) Sub(prev Buckets) Buckets {
	d := Buckets{Count: b.Count - prev.Count, SumNs: b.SumNs - prev.SumNs, Zero: b.Zero - prev.Zero, NativeLow: b.NativeLow}
	for i := range d.Classic {
		d.Classic[i] = b.Classic[i] - prev.Classic[i]
	}
	d.Native = append([]uint64(nil), b.Native...)
	d.combineNative(prev, ^uint64(0)) // adding -1 times prev, in two's complement
	return d
}

// combineNative adds times × o's native counts to b's, widening b's range
// to take them.
func (b *Buckets) combineNative(o Buckets, times uint64) {
	if len(o.Native) == 0 {
		return
	}
	if len(b.Native) == 0 {
		b.NativeLow = o.NativeLow
	}
	lo := min(b.NativeLow, o.NativeLow)
	hi := max(b.NativeLow+len(b.Native), o.NativeLow+len(o.Native))
	if lo != b.NativeLow || hi != b.NativeLow+len(b.Native) {
		wider := make([]uint64, hi-lo)
		copy(wider[b.NativeLow-lo:], b.Native)
		b.Native, b.NativeLow = wider, lo
	}
	for i, n := range o.Native {
		b.Native[o.NativeLow-lo+i] += n * times
	}
}

// Quantile is the q-quantile (0 < q ≤ 1) of the values, in ns, read from
// the native buckets: the bucket it falls in, interpolated linearly
// within it. 0 when there are no values.
func (b Buckets) Quantile(q float64) float64 {
	if b.Count == 0 {
		return 0
	}
	rank := q * float64(b.Count)
	seen := float64(b.Zero)
	if rank <= seen {
		return 0
	}
	for i, n := range b.Native {
		if n == 0 {
			continue
		}
		if seen+float64(n) >= rank {
			k := b.NativeLow + i
			lower, upper := NativeUpperSeconds(k-1), NativeUpperSeconds(k)
			return 1e9 * (lower + (upper-lower)*(rank-seen)/float64(n))
		}
		seen += float64(n)
	}
	return 1e9 * NativeUpperSeconds(b.NativeLow+len(b.Native)-1)
}

// MeanNs is the mean value, in ns; 0 when there are none.
func (b Buckets) MeanNs() float64 {
	if b.Count == 0 {
		return 0
	}
	return float64(b.SumNs) / float64(b.Count)
}

// BucketsOf is a copy of h.
func BucketsOf(h *Histogram) Buckets {
	var b Buckets
	h.copyTo(&b)
	return b
}
