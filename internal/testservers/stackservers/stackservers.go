// Package stackservers holds servers in interpreted languages whose two
// routes spend their CPU in functions of their own: GET /light in
// light_work (lightWork), GET /heavy in heavy_work (heavyWork), each
// burning the µs it is given. The stack tests check each route's samples
// are under its own function; reqprof-bench measures what reading their
// interpreter frames costs. Each server says "listening on ADDR" once it
// serves (but the PHP script, which php-fpm runs), and on SIGTERM prints
// its requests by path as one JSON line. The tests run them from this
// directory; reqprof-bench, which carries them compiled in, writes them
// out (Write).
package stackservers

import (
	_ "embed"
	"os"
	"path/filepath"
)

// The servers' sources.
var (
	//go:embed routes.py
	Python string
	//go:embed routes.php
	PHP string
	//go:embed routes.js
	Node string
)

// Write writes a server's source to dir, named name, and says its path.
func Write(dir, name, source string) (string, error) {
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(source), 0o644)
}
