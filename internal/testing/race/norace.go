//go:build !race

// Package race tells tests whether the race detector is on. It slows code
// several times, allocates on its own and makes sync.Pool drop what it is
// given now and then: timing and allocation budgets are judged without it
// (make bench), and only loosely with it.
package race

// Enabled reports whether the binary was built with the race detector.
const Enabled = false
