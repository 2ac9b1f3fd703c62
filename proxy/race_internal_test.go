//go:build race

package proxy

// raceEnabled: the race detector allocates on its own and makes sync.Pool
// drop what it is given now and then.
const raceEnabled = true
