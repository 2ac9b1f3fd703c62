package ascii

import "strconv"

// smallInts holds the decimal text of 0 to 1023: status codes and the
// numbers of rate-limit headers come from here on every request.
var smallInts = func() (t [1024]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// SmallInts bounds the table: Itoa allocates for no n in [0, SmallInts).
const SmallInts = len(smallInts)

// Itoa returns n in decimal. From 0 to 1023 it returns a string of a table
// and does not allocate, which the per-request paths (metric labels,
// response headers) rely on.
func Itoa(n int64) string {
	if n >= 0 && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
}
