package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a Go CPU profile of the whole run to the file
// PYRUN_CPU_PROFILE names, if it names one: a developer's tool for seeing
// where pyrun's own time goes (scripts/bench/README.md), not a setting.
// The returned function ends the profile.
func startCPUProfile(stderr io.Writer) (stop func()) {
	path := os.Getenv("PYRUN_CPU_PROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "pyrun: no CPU profile: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "pyrun: CPU profile: %v\n", err)
		}
	}
}
