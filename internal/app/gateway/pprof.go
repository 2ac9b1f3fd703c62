package gateway

import "runtime"

// With admin.pprof: true, /debug/pprof/block and /debug/pprof/mutex have
// something to show: the runtime records no blocking or contention events
// unless asked to, so without these rates both profiles are always empty.
// The rates are modest, meant to stay on in production while pprof is on:
// a blocking event is recorded for every 100 µs spent blocked (longer
// events always, shorter ones in proportion), and one mutex contention
// event in 100. They are the process's, so Run sets them for as long as it
// serves and puts back what was there before.
const (
	blockProfileRate     = 100_000 // nanoseconds blocked per recorded event
	mutexProfileFraction = 100     // one contention event in this many
)

// enableContentionProfiles turns the block and mutex profiles on and
// returns the function that restores the previous rates.
func enableContentionProfiles() (restore func()) {
	prevMutex := runtime.SetMutexProfileFraction(mutexProfileFraction)
	runtime.SetBlockProfileRate(blockProfileRate)
	return func() {
		runtime.SetMutexProfileFraction(prevMutex)
		// The runtime gives no way to read the block rate back; off is
		// its default, and no other part of faxgate sets it.
		runtime.SetBlockProfileRate(0)
	}
}
