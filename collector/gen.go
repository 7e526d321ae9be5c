package collector

// The generated objects are committed so that `go build` needs no clang;
// `make generate` rebuilds them and `make check-generate` proves them current.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -Wpadded -mcpu=v3" -target amd64 -type request_record -type target_stats -type conn_state -type thread_state -type cost -type syscall_slot -type go_layout -type limits -type conn_phase -type conn_role -type record_flags -type record_kind -type chunk_record -type unix_path -type setup_state -type stdio_key -type stack_sample -type sample_flags -type self_kind -type self_timing -type self_runs -type backend_record -type backend_use -type runtime_model -type target_role -type backend_peer -type py_layout -type interp_layout -type interp_kind reqprof ../bpf/reqprof.bpf.c -- -I../bpf
//go:generate go run ./internal/gensyscalls /usr/include/x86_64-linux-gnu/asm/unistd_64.h syscalls_amd64.go
