package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version and commit are set by the build, as make build does:
//
//	go build -ldflags "-X main.version=$(git describe --always --dirty) -X main.commit=..."
//
// Without version, the module's version is used when Go recorded one (go
// install ...@v1.2.3); the commit Go recorded (vcs.revision, which it
// does not in a git worktree or with -buildvcs=false) comes before commit.
var version, commit string

// buildVersion is reqprof's version and the commit it was built from:
// ldVersion, or else the module version info records; and info's VCS
// revision, shortened, "-dirty" when the tree had changes, or else
// ldCommit. Each is "" when unknown.
func buildVersion(ldVersion, ldCommit string, info *debug.BuildInfo) (ver, rev string) {
	ver = ldVersion
	if info == nil {
		return ver, ldCommit
	}
	if ver == "" && info.Main.Version != "(devel)" {
		ver = info.Main.Version
	}
	modified := false
	for _, setting := range info.Settings {
		switch setting.Key {
		case "vcs.revision":
			rev = setting.Value
		case "vcs.modified":
			modified = setting.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		rev = ldCommit
	case modified:
		rev += "-dirty"
	}
	return ver, rev
}

// thisBuild is this binary's version and commit.
func thisBuild() (ver, rev string) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return buildVersion(version, commit, info)
}

// writeVersion prints what reqprof --version prints:
// "reqprof v0.3.0 (commit 1a2b3c4d5e6f)".
func writeVersion(w io.Writer, ver, rev string) {
	if ver == "" {
		ver = "devel"
	}
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(w, "reqprof %s (commit %s)\n", ver, rev)
}
