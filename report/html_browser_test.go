package report

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestHTMLInChromium has a real browser lay out and paint the page: the
// bars it built from the page must be the ones drawn, and the picture must
// show every chart in its colours.
func TestHTMLInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	s := sdkSummary(t)
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
	url := "file://" + pagePath

	t.Run("DOM", func(t *testing.T) {
		dom := string(runChromium(t, chromium, "--dump-dom", url))
		bins := binPattern.FindAllStringSubmatch(dom, -1)
		var buckets, drawn int
		for _, target := range s.Targets {
			buckets += len(target.CPUHistogram.Counts)
			for _, n := range target.CPUHistogram.Counts {
				if n > 0 {
					drawn++
				}
			}
		}
		if len(bins) != buckets {
			t.Fatalf("browser built %d histogram bars, want %d", len(bins), buckets)
		}
		var tall int
		for _, bin := range bins {
			if height, err := strconv.ParseFloat(bin[1], 64); err == nil && height > 0 {
				tall++
			}
		}
		if tall != drawn {
			t.Errorf("%d bars have height, want one per bucket with requests: %d", tall, drawn)
		}
		var want int
		for _, target := range s.Targets {
			want += len(cpuParts(target))
		}
		if parts := partPattern.FindAllStringSubmatch(dom, -1); len(parts) != want {
			t.Errorf("browser built %d parts of CPU bars, want %d", len(parts), want)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		shot := filepath.Join(t.TempDir(), "page.png")
		runChromium(t, chromium, "--screenshot="+shot, "--window-size=1000,1700", "--hide-scrollbars",
			"--force-device-scale-factor=1", url)
		img := decodePNG(t, shot)
		counts := countColors(img)
		bounds := img.Bounds()
		if painted := bounds.Dx()*bounds.Dy() - counts[color.RGBA{255, 255, 255, 255}]; painted < 20_000 {
			t.Errorf("only %d pixels are not white: the page is blank", painted)
		}
		// A bar of 1,300 requests' histogram is 20 px wide or so and up to
		// 160 high; a CPU part is at least a few px wide and 20 high.
		for name, hex := range map[string]string{
			"histogram": histogramColor, "user": partColors[0], "syscalls": partColors[1],
		} {
			if n := counts[parseHex(t, hex)]; n < 300 {
				t.Errorf("%d pixels of the %s colour %s: its bars were not painted", n, name, hex)
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
