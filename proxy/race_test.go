//go:build race

package proxy_test

// raceEnabled: the race detector slows code several times and changes
// allocation counts, so timing and allocation budgets are judged without it
// (make bench), and only loosely with it.
const raceEnabled = true
