package collector

// The generated objects are committed so that `go build` needs no clang;
// `make generate` rebuilds them and `make check-generate` proves them current.
// genbpf runs bpf2go with a -type flag for each type bpf/types.h lists as
// mirrored.
//go:generate go run ./internal/genbpf ../bpf/types.h -- -cc clang -cflags "-O2 -g -Wall -Werror -Wpadded -mcpu=v3" -target amd64 reqprof ../bpf/reqprof.bpf.c -- -I../bpf
//go:generate go run ./internal/gensyscalls /usr/include/x86_64-linux-gnu/asm/unistd_64.h syscalls_amd64.go
