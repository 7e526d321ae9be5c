package main

import (
	"os"

	"github.com/reqprof/reqprof/testdata/gohttp"
)

func main() { os.Exit(gohttp.Main(os.Args[1:])) }
