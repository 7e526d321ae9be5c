package serve_test

// Tests that run the real `reqprof serve`: they load BPF, so they need root
// (under CI=true they fail rather than skip), and drive short loopback load
// at a calibrated server.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
)

// binary is reqprof or the calibrated server ("calserver"), built once
// for the package's tests; TestMain removes them.
func binary(t *testing.T, name string) string {
	t.Helper()
	pkg := map[string]string{"reqprof": testbin.Reqprof, "calserver": testbin.Calserver}[name]
	if pkg == "" {
		t.Fatalf("no command %q to build", name)
	}
	return testbin.Path(t, pkg)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startCalserver(t *testing.T, port int, args ...string) *calserver.Process {
	t.Helper()
	cmd := exec.Command(binary(t, "calserver"), append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", port)}, args...)...)
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// served is a running `reqprof serve`, its stderr read line by line.
type served struct {
	metrics  string // http://ADDR/metrics
	attached chan string
	mu       sync.Mutex
	said     []string
}

// startServe runs reqprof serve with args and waits until it has attached.
func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binary(t, "reqprof"), append([]string{"serve", "--listen", listen}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{metrics: "http://" + listen + "/metrics", attached: make(chan string, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.said = append(s.said, sc.Text())
			s.mu.Unlock()
			if strings.Contains(sc.Text(), "attached to") {
				s.attached <- sc.Text()
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("reqprof serve: %v; it said:\n%s", err, s.log())
		}
	})
	s.waitAttached(t)
	return s
}

func (s *served) waitAttached(t *testing.T) string {
	t.Helper()
	select {
	case line := <-s.attached:
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("reqprof serve did not attach within 30 s; it said:\n%s", s.log())
	}
	return ""
}

// waitRequests scrapes serve until its requests counted come to want
// (for up to 30 s) and returns that scrape's values.
func (s *served) waitRequests(t *testing.T, want int) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := values(scrape(t, s.metrics))
		got := sumOf(v, "reqprof_requests_total{route=")
		if got >= float64(want) || time.Now().After(deadline) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *served) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.said, "\n")
}

// scrape reads /metrics as Prometheus would.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// values are a scrape's counters, and histograms' counts and sums, by
// series.
func values(families map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "reqprof_") {
			continue
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
				out[key+"_sum"] = m.Histogram.GetSampleSum()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

func sumOf(v map[string]float64, prefix string) float64 {
	sum := 0.0
	for k, x := range v {
		if strings.HasPrefix(k, prefix) {
			sum += x
		}
	}
	return sum
}

func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*math.Abs(want) }

// TestServeFollowsARestart restarts the server a --port target names:
// serve attaches to the new process, its counters go on in the same
// series, and a scrape every 20 ms, through the restart, never sees one
// go down.
func TestServeFollowsARestart(t *testing.T) {
	testbin.RequireBPF(t)
	port := freePort(t)
	first := startCalserver(t, port, "--burn", "100us")
	s := startServe(t, "--port", fmt.Sprintf("%d=api", port))

	stopScraping := make(chan struct{})
	scraped := make(chan int)
	go func() {
		prev, n := map[string]float64{}, 0
		defer func() { scraped <- n }()
		for {
			select {
			case <-stopScraping:
				return
			case <-time.After(20 * time.Millisecond):
			}
			now := values(scrape(t, s.metrics))
			for k, v := range now {
				if strings.Contains(k, "_info") || strings.Contains(k, "_up{") {
					continue
				}
				if v < 0 || v < prev[k] {
					t.Errorf("scrape %d: %s went from %g to %g", n, k, prev[k], v)
				}
			}
			prev = now
			n++
		}
	}()

	load := func(addr string) {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: addr, Conns: 2, Requests: 1500}); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	load(first.Addr)
	firstPID := first.PID()
	if _, err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second := startCalserver(t, port, "--burn", "100us")
	started := time.Now()
	line := s.waitAttached(t)
	t.Logf("attached to the new process %.0f ms after it listened: %s", float64(time.Since(started).Milliseconds()), line)
	load(second.Addr)
	// The collector hands over what it drained at its next reads.
	v := s.waitRequests(t, 3000)
	close(stopScraping)
	t.Logf("%d scrapes through the restart", <-scraped)

	if got := sumOf(v, "reqprof_requests_total{route="); !within(got, 3000, 0.01) {
		t.Errorf("%.0f requests counted, the load sent 3000 (1500 to each process)", got)
	}
	if v["reqprof_attaches_total{}"] != 2 || v["reqprof_lost_events_total{target=api}"] != 0 {
		t.Errorf("attaches %g, lost events %g; want 2 and 0", v["reqprof_attaches_total{}"], v["reqprof_lost_events_total{target=api}"])
	}
	info := fmt.Sprintf("reqprof_target_info{comm=calserver,pid=%d,target=api}", second.PID())
	if v[info] != 1 || v[fmt.Sprintf("reqprof_target_info{comm=calserver,pid=%d,target=api}", firstPID)] != 0 {
		t.Errorf("no %s, or the first process still said profiled: %v", info, v)
	}
}

// TestServePrometheusMatchesServer scrapes reqprof serve with a real
// Prometheus every second while the calibrated server is loaded, and asks
// Prometheus: rate(sum)/rate(count) of the CPU histogram is within 3% of
// the server's own CPU per request, and the request rate within 2% of the
// load's. The server's clock counts what reqprof's programs cost its
// threads, so serve runs --gross (net, the figures were 1 to 3% under
// it by that cost alone, and a run's noise took the native histograms'
// mean to -3.6%).
func TestServePrometheusMatchesServer(t *testing.T) {
	testbin.RequireBPF(t)
	prometheus := testbin.LookPath(t, "prometheus")
	port := freePort(t)
	srv := startCalserver(t, port, "--burn", "200us")
	s := startServe(t, "--port", strconv.Itoa(port), "--gross")
	target := strings.TrimSuffix(strings.TrimPrefix(s.metrics, "http://"), "/metrics")
	api := startPrometheus(t, prometheus, target)
	// A second Prometheus reads the native histograms (and, this one's
	// version, only those).
	native := startPrometheus(t, prometheus, target, "--enable-feature=native-histograms")

	// Warm up first: a series is born at the first scrape that sees it, and
	// rate() over a range cannot count what came before that, so the
	// routes' series must exist, and both Prometheuses must have scraped
	// them, before the load starts.
	const warmUp = 200
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.Addr, Conns: 2, Requests: warmUp}); err != nil {
		t.Fatalf("warm-up load: %v", err)
	}
	s.waitRequests(t, warmUp)
	warmedAt := time.Now()
	api.waitScrapeAfter(t, warmedAt)
	native.waitScrapeAfter(t, warmedAt)

	// Load in batches, noting how many were done when, so that the load's
	// rate over any span is known.
	type mark struct {
		at   time.Time
		done int
	}
	marks := []mark{{time.Now(), 0}}
	const loadFor, batch = 5 * time.Second, 500
	for time.Since(marks[0].at) < loadFor {
		res, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.Addr, Conns: 2, Requests: batch})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		marks = append(marks, mark{time.Now(), marks[len(marks)-1].done + res.Requests})
	}
	loadStart, loadEnd, sent := marks[0].at, marks[len(marks)-1].at, marks[len(marks)-1].done
	doneAt := func(at time.Time) float64 { // requests done by then, interpolated within a batch
		for i := 1; i < len(marks); i++ {
			if !marks[i].at.Before(at) {
				a, b := marks[i-1], marks[i]
				return float64(a.done) + float64(b.done-a.done)*float64(at.Sub(a.at))/float64(b.at.Sub(a.at))
			}
		}
		return float64(sent)
	}
	// Every request counted by serve, then scraped by both Prometheuses
	// after the last instant queried below (loadEnd + 500 ms).
	counted := s.waitRequests(t, warmUp+sent)
	scrapedAfter := time.Now()
	if end := loadEnd.Add(500 * time.Millisecond); end.After(scrapedAfter) {
		scrapedAfter = end
	}
	api.waitScrapeAfter(t, scrapedAfter)
	native.waitScrapeAfter(t, scrapedAfter)
	t.Logf("serve counted %.0f requests; both Prometheuses scraped it after that", sumOf(counted, "reqprof_requests_total{route="))
	truth, err := srv.Stop()
	if err != nil {
		t.Fatal(err)
	}

	// CPU per request over the load: each Prometheus's range runs from its
	// last scrape before the load to its last scrape of all, so rate(sum)
	// / rate(count) is the load's whole Δsum/Δcount. The server's mean also
	// holds the warm-up's few requests.
	cpu := api.queryOverLoad(t, "sum(rate(reqprof_request_cpu_seconds_sum[%s])) / sum(rate(reqprof_request_cpu_seconds_count[%s]))", loadStart)
	got, want := cpu*1e6, truth.MeanCPUMicros()
	t.Logf("cpu per request: Prometheus %.1f µs, the server %.1f µs (%+.2f%%)", got, want, 100*(got/want-1))
	if !within(got, want, 0.03) {
		t.Errorf("rate(sum)/rate(count) of the CPU histogram is %.1f µs, the server measured %.1f µs: more than 3%% apart", got, want)
	}

	nativeCPU := native.queryOverLoad(t, "histogram_sum(sum(rate(reqprof_request_cpu_seconds[%s]))) / histogram_count(sum(rate(reqprof_request_cpu_seconds[%s])))", loadStart)
	p50 := native.queryOverLoad(t, "histogram_quantile(0.5, sum(rate(reqprof_request_cpu_seconds[%s])))", loadStart)
	t.Logf("native histograms: cpu per request %.1f µs, p50 %.1f µs", nativeCPU*1e6, p50*1e6)
	if !within(nativeCPU*1e6, want, 0.03) || p50 <= 0 || p50*1e6 > 2*want {
		t.Errorf("from native histograms: cpu per request %.1f µs, p50 %.1f µs; the server measured a mean of %.1f µs", nativeCPU*1e6, p50*1e6, want)
	}

	// The request rate inside the load: Prometheus's rate() over 4 s
	// ending just before the load did is the counter's slope between the
	// first and last scrapes in that range, which the load's own rate over
	// the same span is compared with.
	rateAt := loadEnd.Add(-200 * time.Millisecond)
	rate := api.query(t, "sum(rate(reqprof_requests_total[4s]))", rateAt)
	first, last := api.span(t, "reqprof_requests_total[4s]", rateAt)
	slope := (last.v - first.v) / last.at.Sub(first.at).Seconds()
	loadRate := (doneAt(last.at) - doneAt(first.at)) / last.at.Sub(first.at).Seconds()
	t.Logf("request rate: Prometheus %.1f/s (scrapes %.1f/s over %v), the load %.1f/s over the same span (%+.2f%%)",
		rate, slope, last.at.Sub(first.at), loadRate, 100*(rate/loadRate-1))
	if !within(rate, loadRate, 0.02) {
		t.Errorf("rate(reqprof_requests_total) is %.1f/s, the load sent %.1f/s: more than 2%% apart", rate, loadRate)
	}

	// And every request is counted.
	total := api.query(t, "sum(reqprof_requests_total)", time.Now())
	if !within(total, float64(warmUp+sent), 0.01) || int(truth.Requests) != warmUp+sent {
		t.Errorf("Prometheus has %.0f requests, the warm-up and load sent %d, the server served %d", total, warmUp+sent, truth.Requests)
	}
}

// promAPI is a Prometheus's HTTP API.
type promAPI struct{ base string }

// startPrometheus runs Prometheus with a config of its own scraping target
// (HOST:PORT) every second, and storage in a temporary directory, and
// waits until it has scraped it once; args are more of its flags.
func startPrometheus(t *testing.T, bin, target string, args ...string) promAPI {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: reqprof
    static_configs:
      - targets: [%q]
`, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, append([]string{"--config.file=" + config, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + listen, "--log.level=warn"}, args...)...)
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logFile.Close()
	})
	api := promAPI{base: "http://" + listen}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if v, err := api.tryQuery(`up{job="reqprof"}`, time.Now()); err == nil && v == 1 {
			return api
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := os.ReadFile(logFile.Name())
	t.Fatalf("Prometheus did not scrape reqprof within 30 s; it said:\n%s", b)
	return api
}

// queryOverLoad runs query with its range selectors (each a %s) filled
// with a range from half a second before this Prometheus's last scrape
// before loadStart to its last scrape of all, at that last scrape.
func (p promAPI) queryOverLoad(t *testing.T, query string, loadStart time.Time) float64 {
	t.Helper()
	before := p.query(t, `timestamp(up{job="reqprof"})`, loadStart)
	last := p.query(t, `timestamp(up{job="reqprof"})`, time.Now())
	window := fmt.Sprintf("%dms", int64(math.Ceil((last-before+0.5)*1000)))
	return p.query(t, strings.ReplaceAll(query, "%s", window), time.UnixMilli(int64(math.Round(last*1000))))
}

// waitScrapeAfter waits until Prometheus has scraped reqprof after at,
// for up to 30 s.
func (p promAPI) waitScrapeAfter(t *testing.T, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		last, err := p.tryQuery(`timestamp(up{job="reqprof"})`, time.Now())
		if err == nil && last > float64(at.UnixNano())/1e9 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus at %s did not scrape reqprof after %v within 30 s (last scrape %v: %v)", p.base, at, last, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p promAPI) query(t *testing.T, q string, at time.Time) float64 {
	t.Helper()
	v, err := p.tryQuery(q, at)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// get runs an instant query and returns the answer's body.
func (p promAPI) get(q string, at time.Time) ([]byte, error) {
	form := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 3, 64)}}
	resp, err := http.PostForm(p.base+"/api/v1/query", form)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// sample is a value scraped at a time.
type sample struct {
	at time.Time
	v  float64
}

// span is the first and last samples a range query gives, summed over
// its series (one scrape gives every series the same time).
func (p promAPI) span(t *testing.T, q string, at time.Time) (first, last sample) {
	t.Helper()
	body, err := p.get(q, at)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var answer struct {
		Data struct {
			Result []struct {
				Values [][2]json.RawMessage `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	for i, series := range answer.Data.Result {
		if len(series.Values) < 2 {
			t.Fatalf("%s: %d samples in a series", q, len(series.Values))
		}
		for j, raw := range []([2]json.RawMessage){series.Values[0], series.Values[len(series.Values)-1]} {
			var ts float64
			var v string
			if json.Unmarshal(raw[0], &ts) != nil || json.Unmarshal(raw[1], &v) != nil {
				t.Fatalf("%s: malformed sample %s", q, raw)
			}
			x, _ := strconv.ParseFloat(v, 64)
			s := &first
			if j == 1 {
				s = &last
			}
			if i == 0 {
				s.at = time.Unix(0, int64(ts*1e9))
			}
			s.v += x
		}
	}
	return first, last
}

// tryQuery runs an instant query whose answer is one sample.
func (p promAPI) tryQuery(q string, at time.Time) (float64, error) {
	body, err := p.get(q, at)
	if err != nil {
		return 0, err
	}
	var answer struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]json.RawMessage `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return 0, fmt.Errorf("%v: %s", err, body)
	}
	if answer.Status != "success" {
		return 0, fmt.Errorf("%s", answer.Error)
	}
	if len(answer.Data.Result) != 1 {
		return 0, fmt.Errorf("%d samples, want 1: %s", len(answer.Data.Result), body)
	}
	var s string
	if err := json.Unmarshal(answer.Data.Result[0].Value[1], &s); err != nil {
		return 0, err
	}
	return strconv.ParseFloat(s, 64)
}
