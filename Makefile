# reqprof: `make demo` shows it working, `make test` proves it.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin:/sbin

# What needs root (loading BPF, installing packages) runs as it is for
# root, who may have no sudo, and through sudo for anyone else.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# reqprof --version and the JSON's "version" and "commit": Go records no
# commit in a git worktree or under -buildvcs=false, so the build says it.
VERSION := $(shell git describe --always --dirty 2>/dev/null)
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
ifneq ($(COMMIT),)
COMMIT := $(COMMIT)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
endif
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# Debian packages the build, the generate check and the root tests use:
# real servers and their load generators, a browser for the page test,
# Prometheus to scrape reqprof serve, tmux for the live view's test,
# php-fpm behind nginx for FastCGI and the interpreter frames' tests
# (with the PHP CLI, and the engine's headers its layout table is checked
# against), and uvloop and httptools (what uvicorn's users get by
# default) for the Python runtime tests.
DEB_PACKAGES := clang llvm libbpf-dev linux-libc-dev nginx wrk redis-server redis-tools nghttp2-client uvicorn chromium prometheus tmux python3-aiohttp python3-fastapi python3-uvloop python3-httptools nodejs php8.2-fpm php8.2-cli php8.2-dev
# Commands standing for them.
DEB_COMMANDS := clang llvm-strip nginx wrk redis-server redis-benchmark h2load uvicorn chromium prometheus tmux node php-fpm8.2 php8.2

.PHONY: build generate check-generate deps vet test demo fuzz bench

build:
	$(GO) build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/reqprof ./cmd/reqprof

# Rebuilds the BPF object and its Go bindings (needs clang and libbpf-dev).
generate:
	$(GO) generate ./collector

# Fails if the committed BPF object or bindings differ from what the
# sources generate now.
check-generate: deps
	@tmp=$$(mktemp -d); \
	cp collector/reqprof_x86_bpfel.go collector/reqprof_x86_bpfel.o collector/syscalls_amd64.go $$tmp/; \
	$(GO) generate ./collector; \
	if cmp -s $$tmp/reqprof_x86_bpfel.o collector/reqprof_x86_bpfel.o && cmp -s $$tmp/reqprof_x86_bpfel.go collector/reqprof_x86_bpfel.go && cmp -s $$tmp/syscalls_amd64.go collector/syscalls_amd64.go; then \
		echo "generated BPF objects are current"; rm -rf $$tmp; \
	else \
		echo "generated BPF objects were stale: regenerated now, commit them"; rm -rf $$tmp; exit 1; \
	fi

# Installs what is missing, on Debian.
deps:
	@missing=""; for c in $(DEB_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	test -f /usr/include/bpf/bpf_helpers.h || missing="$$missing libbpf-dev"; \
	test -f /usr/lib/python3/dist-packages/aiohttp/__init__.py || missing="$$missing python3-aiohttp"; \
	test -f /usr/lib/python3/dist-packages/fastapi/__init__.py || missing="$$missing python3-fastapi"; \
	test -f /usr/lib/python3/dist-packages/uvloop/__init__.py || missing="$$missing python3-uvloop"; \
	test -f /usr/include/x86_64-linux-gnu/asm/unistd_64.h || missing="$$missing linux-libc-dev"; \
	test -f /usr/include/php/20220829/main/php.h || missing="$$missing php8.2-dev"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages for:$$missing"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PACKAGES) >/dev/null; \
		$(SUDO) service redis-server stop >/dev/null 2>&1 || true; \
		$(SUDO) service prometheus stop >/dev/null 2>&1 || true; \
		$(SUDO) service php8.2-fpm stop >/dev/null 2>&1 || true; \
	fi

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# The test command of the README and of CI. BPF tests need root; under
# CI=true they fail instead of skipping. One package at a time (-p 1): the
# root tests compare reqprof's figures with servers' own clocks on a
# machine of two CPUs, and another package's tests burning CPU meanwhile
# (the calibrated server's, headless Chromium) would change what a syscall
# costs between reqprof's calibration and the measurement.
test: deps check-generate vet
	$(SUDO) env "PATH=$(PATH)" $(if $(CI),"CI=$(CI)") $(GO) test -p 1 -count=1 ./...

demo: build
	$(SUDO) ./bin/reqprof demo

# Every fuzz target, as package:function; `make fuzz` fails if a Fuzz
# function of the repository is not listed here. Each also replays its
# corpus (seeds and testdata/fuzz) in `make test`.
FUZZ_TARGETS := \
	./report:FuzzReadJSON \
	./collector:FuzzDecodeRecord \
	./collector:FuzzDecodeChunk \
	./collector:FuzzDecodeStackSample \
	./collector:FuzzConsume \
	./collector:FuzzDecodeThreads \
	./collector:FuzzParseListeningPorts \
	./collector:FuzzParseListeningUnix \
	./collector:FuzzParseProcStat \
	./collector:FuzzParseFdinfoIDs \
	./collector:FuzzParseCPUList \
	./collector:FuzzReadGoLayout \
	./collector/cpython:FuzzReadInterpreter \
	./collector/cpython:FuzzDWARFLayout \
	./collector/cpython:FuzzDebugOffsets \
	./collector/cpython:FuzzLineTable310 \
	./collector/cpython:FuzzLineTable311 \
	./collector/php:FuzzParseBuild \
	./collector/php:FuzzReadInterpreter \
	./collector/php:FuzzLocate \
	./collector/route:FuzzName \
	./collector/route:FuzzJSONMethod \
	./collector/route:FuzzFastCGIParams \
	./collector/stream:FuzzConnHTTP1 \
	./collector/stream:FuzzConnH2 \
	./collector/stream:FuzzConnRESP \
	./collector/stream:FuzzConnJSONRPC \
	./collector/stream:FuzzResponses \
	./collector/stream:FuzzConnFastCGI \
	./collector/symbols:FuzzParsePerfMap \
	./collector/symbols:FuzzParseMapsLine \
	./collector/symbols:FuzzParseKallsyms \
	./collector/symbols:FuzzReadObject \
	./collector/symbols:FuzzGoFrames \
	./collector/symbols:FuzzGNUBuildID \
	./serve:FuzzParseStat \
	./serve:FuzzListeningInodes \
	./serve:FuzzReadDiagReply

# What `make fuzz` runs (FUZZ=./serve:FuzzParseStat for one), and how
# many executions of each.
FUZZ ?= $(FUZZ_TARGETS)
FUZZ_EXECS ?= 1000000

# Runs every fuzz target for FUZZ_EXECS executions, one worker each, one
# target after another: over 95 minutes of runs on the two-CPU VM while
# other tests ran (docs/FUZZING.md lists each target's; FuzzReadGoLayout, the
# slowest, was stopped short). A crasher is written to the package's
# testdata/fuzz, where `make test` replays it. The 2h timeout is per
# target: go test gives a single input that hangs no other bound.
fuzz:
	@missing=""; for fn in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //'); do \
		case " $(FUZZ_TARGETS) " in *":$$fn "*) ;; *) missing="$$missing $$fn";; esac; \
	done; \
	if [ -n "$$missing" ]; then echo "fuzz targets missing from FUZZ_TARGETS:$$missing"; exit 1; fi
	@log=$$(mktemp); failed=""; for t in $(FUZZ); do \
		echo "fuzz: $${t##*:} ($${t%%:*}), $(FUZZ_EXECS) executions"; \
		if $(GO) test $${t%%:*} -run '^$$' -fuzz "^$${t##*:}\$$" -fuzztime $(FUZZ_EXECS)x -parallel 1 -timeout 2h >$$log 2>&1; then \
			grep 'execs:' $$log | tail -n 1; \
		else \
			cat $$log; failed="$$failed $${t##*:}"; \
		fi; \
	done; rm -f $$log; \
	if [ -n "$$failed" ]; then echo "fuzz targets that failed:$$failed"; exit 1; fi

# Measures reqprof's overhead and scale on this machine from a real run
# (root, nginx, wrk; about 6 minutes) and writes docs/BENCHMARKS.md.
# BENCH_FLAGS=--quick for a run of about two minutes.
bench: deps build
	$(GO) build -o bin/reqprof-bench ./cmd/reqprof-bench
	$(SUDO) ./bin/reqprof-bench --reqprof bin/reqprof --markdown docs/BENCHMARKS.md $(BENCH_FLAGS)
