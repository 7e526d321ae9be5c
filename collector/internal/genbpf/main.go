// Command genbpf compiles reqprof's BPF programs and writes their Go
// bindings with bpf2go, giving it a -type flag for each type the BPF
// header lists as mirrored (MIRRORED_STRUCT and MIRRORED_ENUM lines), so
// that the list of types Go mirrors is written once, in C.
package main

import (
	"bufio"
	"fmt"
	"log"
	"os"
	"os/exec"
	"regexp"
)

// mirrored matches a line of the list: MIRRORED_STRUCT(name); or
// MIRRORED_ENUM(name);.
var mirrored = regexp.MustCompile(`^MIRRORED_(?:STRUCT|ENUM)\(([a-z0-9_]+)\);$`)

func main() {
	if len(os.Args) < 4 || os.Args[2] != "--" {
		log.Fatal("usage: genbpf types.h -- BPF2GO_ARGS...")
	}
	types, err := mirroredTypes(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	args := []string{"tool", "bpf2go"}
	for _, t := range types {
		args = append(args, "-type", t)
	}
	args = append(args, os.Args[3:]...)
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("bpf2go: %v", err)
	}
}

// mirroredTypes reads the names the header lists, in its order.
func mirroredTypes(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var types []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := mirrored.FindStringSubmatch(sc.Text()); m != nil {
			types = append(types, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("%s lists no mirrored type", path)
	}
	return types, nil
}
