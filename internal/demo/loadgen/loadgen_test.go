package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// pathsServed runs cfg against a server that records the paths it is
// asked for, in order, and returns them with the run's result.
func pathsServed(t *testing.T, cfg Config) ([]string, Result) {
	t.Helper()
	var mu sync.Mutex
	var served []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	cfg.Addr = strings.TrimPrefix(srv.URL, "http://")
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return served, res
}

func TestPathsInTurn(t *testing.T) {
	served, res := pathsServed(t, Config{Conns: 1, Requests: 100, Paths: []string{"/a", "/b"}})
	if res.Requests != 100 || res.PerPath["/a"] != 50 || res.PerPath["/b"] != 50 {
		t.Fatalf("got %+v, want 50 of each path", res)
	}
	for i, p := range served {
		if want := []string{"/a", "/b"}[i%2]; p != want {
			t.Fatalf("request %d asked for %s, want %s: paths in turn", i, p, want)
		}
	}
}

// TestPathsShuffled: each request's path at random, the same from run to
// run, counted by path as served, on one connection or a connection each.
func TestPathsShuffled(t *testing.T) {
	for _, perRequest := range []bool{false, true} {
		cfg := Config{Conns: 1, Requests: 200, Paths: []string{"/a", "/b"}, Shuffle: true, ConnPerRequest: perRequest}
		served, res := pathsServed(t, cfg)
		if res.Requests != 200 || res.PerPath["/a"]+res.PerPath["/b"] != 200 {
			t.Fatalf("conn per request %v: got %+v, want 200 requests of the two paths", perRequest, res)
		}
		repeats := 0
		for i := 1; i < len(served); i++ {
			if served[i] == served[i-1] {
				repeats++
			}
		}
		// In turn, no path follows itself; at random, about half do.
		if repeats < 50 || repeats > 150 {
			t.Errorf("conn per request %v: %d of 199 requests asked for the path before them, want about half", perRequest, repeats)
		}
		again, _ := pathsServed(t, cfg)
		if strings.Join(again, ",") != strings.Join(served, ",") {
			t.Errorf("conn per request %v: two runs of one config asked for paths in different orders, want the same: a seed fixed per connection", perRequest)
		}
		for _, p := range cfg.Paths {
			n := 0
			for _, s := range served {
				if s == p {
					n++
				}
			}
			if n != res.PerPath[p] {
				t.Errorf("conn per request %v: %s: served %d, counted %d", perRequest, p, n, res.PerPath[p])
			}
		}
	}
}
