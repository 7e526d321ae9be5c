package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromiumPath is Debian's chromium (package chromium). Without it the
// browser test skips, except under CI=true, where it must run.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is needed to test the page in a browser (apt-get install chromium): %v", err)
		}
		t.Skipf("chromium is not installed (apt-get install chromium): %v", err)
	}
	return path
}

// runChromium runs chromium headless with args, isolated from any profile
// and from the network, and returns what it printed on stdout.
func runChromium(t *testing.T, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--user-data-dir=" + t.TempDir(),
	}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %q: %v\n%s", args, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// writePage writes s's page to a file and returns its URL.
func writePage(t *testing.T, s Summary) string {
	t.Helper()
	pagePath := filepath.Join(t.TempDir(), "page.html")
	f, err := os.Create(pagePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return "file://" + pagePath
}

// TestHTMLInChromium has a real browser lay out and paint the pages of a
// comparison and of one target: the bars and labels it built from them
// must be the ones drawn, and the pictures must show every chart in its
// colours.
func TestHTMLInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	compared := sdkSummary(t)
	comparedURL := writePage(t, compared)
	one := Summarize(oneTargetRun())
	oneURL := writePage(t, one)

	t.Run("DOM", func(t *testing.T) {
		dom := string(runChromium(t, chromium, "--dump-dom", comparedURL))
		// The compared targets' histograms are one chart, an outline and
		// bars per target, and no chart of their own.
		if n := strings.Count(dom, `class="overlay"`); n != 1 {
			t.Errorf("browser built %d overlaid charts, want 1", n)
		}
		if bins := binPattern.FindAllString(dom, -1); len(bins) != 0 {
			t.Errorf("browser built %d bars of separate histograms", len(bins))
		}
		if outlines := outlinePattern.FindAllString(dom, -1); len(outlines) != len(compared.Targets) {
			t.Errorf("browser built %d outlines, want one per target: %d", len(outlines), len(compared.Targets))
		}
		hists := make([]Histogram, len(compared.Targets))
		for i, target := range compared.Targets {
			hists[i] = *target.CPUHistogram
		}
		var slots int
		for _, h := range hists {
			for _, share := range slotShares(h, axisOf(hists), overlaySlots) {
				if share > 0 {
					slots++
				}
			}
		}
		if shares := sharePattern.FindAllString(dom, -1); len(shares) != slots {
			t.Errorf("browser built %d bars of the overlay, want one per slot a target has requests in: %d", len(shares), slots)
		}
		var want int
		for _, target := range compared.Targets {
			want += len(cpuParts(target))
		}
		if parts := partPattern.FindAllStringSubmatch(dom, -1); len(parts) != want {
			t.Errorf("browser built %d parts of CPU bars, want %d", len(parts), want)
		}
		for _, label := range []string{
			">CPU per request (µs), log scale</text>", ">share of its requests</text>",
			`<h2 class="chart-title">CPU per request: each target's distribution</h2>`,
			`<p class="waits">`, `<p class="cpu-seen">`,
		} {
			if !strings.Contains(dom, label) {
				t.Errorf("browser built no %q", label)
			}
		}

		// One target's histogram is a bar per bucket, with requests tall.
		dom = string(runChromium(t, chromium, "--dump-dom", oneURL))
		bins := binPattern.FindAllStringSubmatch(dom, -1)
		h := one.Targets[0].CPUHistogram
		if len(bins) != len(h.Counts) {
			t.Fatalf("browser built %d histogram bars, want %d", len(bins), len(h.Counts))
		}
		var tall, drawn int
		for i, bin := range bins {
			if height, err := strconv.ParseFloat(bin[1], 64); err == nil && height > 0 {
				tall++
			}
			if h.Counts[i] > 0 {
				drawn++
			}
		}
		if tall != drawn {
			t.Errorf("%d bars have height, want one per bucket with requests: %d", tall, drawn)
		}
		for _, label := range []string{
			">CPU per request (µs), log scale</text>", ">requests</text>",
			`<h4 class="chart-title">CPU per request: histogram</h4>`,
			"<td>worker</td><td>8</td>", "<h4>unattributed CPU by thread name, largest first</h4>",
			">reqprof's own cost on the whole machine over the 10.0 s window</h2>",
		} {
			if !strings.Contains(dom, label) {
				t.Errorf("browser built no %q", label)
			}
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		// A bar of 1,300 requests' histogram is 20 px wide or so and up to
		// 160 high; a CPU part is at least a few px wide and 20 high; an
		// outline is 2 px wide around bars of its target's requests.
		colours := map[string]map[string]string{
			comparedURL: {
				"user": partColors[0], "syscalls": partColors[1],
				"first target": seriesColors[0], "second target": seriesColors[1], "third target": seriesColors[2],
			},
			oneURL: {"histogram": histogramColor, "user": partColors[0]},
		}
		for url, want := range colours {
			shot := filepath.Join(t.TempDir(), "page.png")
			runChromium(t, chromium, "--screenshot="+shot, "--window-size=1000,2600", "--hide-scrollbars",
				"--force-device-scale-factor=1", url)
			img := decodePNG(t, shot)
			counts := countColors(img)
			bounds := img.Bounds()
			if painted := bounds.Dx()*bounds.Dy() - counts[color.RGBA{255, 255, 255, 255}]; painted < 20_000 {
				t.Errorf("%s: only %d pixels are not white: the page is blank", url, painted)
			}
			for name, hex := range want {
				if n := counts[parseHex(t, hex)]; n < 300 {
					t.Errorf("%s: %d pixels of the %s colour %s: its bars were not painted", url, n, name, hex)
				}
			}
		}
	})
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	return img
}

func countColors(img image.Image) map[color.RGBA]int {
	counts := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	return counts
}

func parseHex(t *testing.T, hex string) color.RGBA {
	t.Helper()
	v, err := strconv.ParseUint(hex[1:], 16, 32)
	if err != nil || len(hex) != 7 {
		t.Fatalf("not a colour: %q", hex)
	}
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 255}
}

// TestFlameGraphsInChromium has a real browser lay out and paint the page
// of two targets with stack samples: every flame graph box built must be
// in its DOM, the route at each graph's root painted across the page's
// width, and the differential graph painted in the colours of shares that
// grew and fell.
func TestFlameGraphsInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	s := stacksComparison()
	url := writePage(t, s)
	page, err := newHTMLPage(s)
	if err != nil {
		t.Fatal(err)
	}
	var boxes int
	for _, target := range page.Targets {
		for _, f := range target.Flames {
			boxes += len(f.Chart.Frames)
		}
	}
	for _, f := range page.Differentials {
		boxes += len(f.Chart.Frames)
	}

	dom := string(runChromium(t, chromium, "--dump-dom", url))
	if got := len(framePattern.FindAllString(dom, -1)); got != boxes {
		t.Errorf("browser built %d flame graph boxes, want %d", got, boxes)
	}
	for _, label := range []string{
		`<h2 class="chart-title">Differential flame graph</h2>`,
		`<svg xmlns="http://www.w3.org/2000/svg" class="flame"`,
		">json.Marshal</text>",    // a label inside its box
		">GET /users/{id}</text>", // a route, at the root, whole
		`<span class="flame-details">Point at a box`,
	} {
		if !strings.Contains(dom, label) {
			t.Errorf("browser built no %q", label)
		}
	}

	const window = 1000
	shot := filepath.Join(t.TempDir(), "page.png")
	// REQPROF_KEEP_SHOTS=DIR keeps the picture, to look at.
	if dir := os.Getenv("REQPROF_KEEP_SHOTS"); dir != "" {
		shot = filepath.Join(dir, "flames.png")
	}
	runChromium(t, chromium, "--screenshot="+shot, fmt.Sprintf("--window-size=%d,8000", window), "--hide-scrollbars",
		"--force-device-scale-factor=1", url)
	img := decodePNG(t, shot)
	counts := countColors(img)
	// A root is 15 px high and as wide as the page: 8 graphs' roots,
	// less labels.
	for name, want := range map[string]struct {
		hex string
		min int
	}{
		"route at the root": {flameRootColor, 8 * 11_000},
		"grew most":         {flameGrew[len(flameGrew)-1], 5_000},
		"fell":              {"#9ecae1", 1_000},
	} {
		if n := counts[parseHex(t, want.hex)]; n < want.min {
			t.Errorf("%d pixels of the %s colour %s, want at least %d", n, name, want.hex, want.min)
		}
	}
	// The page's body is the window less its 24 px margins: a root spans it.
	if run, want := longestRun(img, parseHex(t, flameRootColor)), window-2*24-2; run < want {
		t.Errorf("the widest root is %d px wide, want the page's width, %d px at least", run, want)
	}
}

// longestRun is the most pixels of colour c side by side in a row of img.
func longestRun(img image.Image, c color.RGBA) int {
	b := img.Bounds()
	longest := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		run := 0
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == c {
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
	}
	return longest
}

// flameProbe is run by the page after its own script: it points at
// json.Marshal's box in the last flame graph (the differential one, whose
// routes are side by side), clicks it, then clicks the graph's root, and
// writes what the page showed at each step as JSON into
// <pre id="flame-probe">, for the test to read from the browser's DOM.
const flameProbe = `<script>
(function () {
  var out = {window: window.innerWidth};
  var graphs = document.querySelectorAll("svg.flame");
  var svg = graphs[graphs.length - 1];
  var frames = Array.prototype.slice.call(svg.querySelectorAll("g.frame"));
  var shown = function () { return frames.filter(function (g) { return g.style.display !== "none"; }).length; };
  var width = function (g) { return +g.querySelector("rect").getAttribute("width"); };
  var root = frames.filter(function (g) { return g.getAttribute("data-depth") === "0"; })[0];
  var marshal = frames.filter(function (g) { return g.querySelector("text").getAttribute("data-label") === "json.Marshal"; })[0];
  var details = svg.nextElementSibling.querySelector(".flame-details");
  var reset = svg.nextElementSibling.querySelector(".flame-reset");
  out.svg = +svg.getAttribute("width");
  out.root = width(root);
  out.marshal = width(marshal);
  out.boxes = frames.length;
  out.shown = shown();
  out.before = details.textContent;
  marshal.querySelector("rect").dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  out.hover = details.textContent;
  marshal.querySelector("rect").dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.zoomed = {marshal: width(marshal), root: width(root), label: marshal.querySelector("text").textContent,
    shown: shown(), reset: !reset.hidden, rootFaded: root.classList.contains("caller")};
  root.querySelector("rect").dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.back = {marshal: width(marshal), shown: shown(), reset: !reset.hidden};
  var pre = document.createElement("pre");
  pre.id = "flame-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>`

// TestFlameGraphZoomInChromium: in a real browser the page's script lays
// a flame graph out at the page's width, says a box's name and share when
// the pointer is on it, zooms into it on a click (the box across the
// graph, boxes outside it hidden) and back out on a click on the root.
func TestFlameGraphZoomInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	var b bytes.Buffer
	if err := WriteHTML(&b, stacksComparison()); err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(b.String(), "</body>", flameProbe+"</body>", 1)
	path := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	const window = 1400
	dom := string(runChromium(t, chromium, "--dump-dom", fmt.Sprintf("--window-size=%d,2000", window), "file://"+path))
	m := probePattern.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the probe wrote nothing: the page's script failed?\n%s", dom[max(0, len(dom)-2000):])
	}
	var got struct {
		Window, SVG, Root, Marshal float64
		Boxes, Shown               int
		Before, Hover              string
		Zoomed                     struct {
			Marshal, Root float64
			Label         string
			Shown         int
			Reset         bool
			RootFaded     bool
		}
		Back struct {
			Marshal float64
			Shown   int
			Reset   bool
		}
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &got); err != nil {
		t.Fatalf("probe %q: %v", m[1], err)
	}
	t.Logf("probe: %+v", got)
	// The body is the window less its margins (24 px each side) and the
	// scroll bar (15 px at most).
	if got.SVG < window-48-15 || got.SVG > window-48 {
		t.Errorf("graph %.0f px wide in a %.0f px window, want the page's width", got.SVG, got.Window)
	}
	if got.Root != got.SVG-0.5 {
		t.Errorf("root %.1f px wide, want the graph's %.0f less its 0.5 px gap", got.Root, got.SVG)
	}
	// json.Marshal has 190 of canary's 243 samples of finished requests.
	if want := 190.0/243*got.SVG - 0.5; math.Abs(got.Marshal-want) > 0.1 {
		t.Errorf("json.Marshal %.1f px wide, want 190/243 of the graph, %.1f", got.Marshal, want)
	}
	if got.Shown != got.Boxes {
		t.Errorf("%d of %d boxes shown before zooming", got.Shown, got.Boxes)
	}
	if !strings.HasPrefix(got.Before, "Point at a box") {
		t.Errorf("before pointing, the graph says %q", got.Before)
	}
	if want := "encoding/json.Marshal: 78.2% of canary's samples (190), 49.0% of stable's"; got.Hover != want {
		t.Errorf("pointing at json.Marshal, the graph says %q, want %q", got.Hover, want)
	}
	z := got.Zoomed
	if z.Marshal != got.SVG-0.5 || z.Root != got.SVG-0.5 || !z.RootFaded {
		t.Errorf("zoomed into json.Marshal: it is %.1f px wide, the root %.1f (faded %v); want both across the graph, the root faded",
			z.Marshal, z.Root, z.RootFaded)
	}
	if z.Label != "json.Marshal" || !z.Reset || z.Shown >= got.Boxes || z.Shown < 2 {
		t.Errorf("zoomed: label %q, zoom-out button shown %v, %d of %d boxes shown; want the label whole, the button, its callers and callees only",
			z.Label, z.Reset, z.Shown, got.Boxes)
	}
	if got.Back.Marshal != got.Marshal || got.Back.Shown != got.Boxes || got.Back.Reset {
		t.Errorf("zoomed back out: json.Marshal %.1f px (was %.1f), %d of %d boxes shown, button shown %v",
			got.Back.Marshal, got.Marshal, got.Back.Shown, got.Boxes, got.Back.Reset)
	}
}

var probePattern = regexp.MustCompile(`<pre id="flame-probe">([^<]*)</pre>`)
