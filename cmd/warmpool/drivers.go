package main

// The pod drivers `serve --driver` may name: one import each. Each registers itself
// with the driver registry (its name, its own flags and its constructor); a driver
// that is not imported here is not in the binary.
import (
	_ "github.com/warmpool/warmpool/driver/fake"
	_ "github.com/warmpool/warmpool/driver/local"
	_ "github.com/warmpool/warmpool/k8s"
)
