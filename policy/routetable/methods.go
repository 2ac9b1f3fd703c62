package routetable

// methods are the HTTP methods the gateway forwards
// (docs/callers-and-policy.md); a route needs one of them, and any other
// method gets 405.
var methods = [...]string{"GET", "POST", "PATCH", "PUT", "DELETE"}

// Methods returns the HTTP methods the gateway forwards, in the order
// docs/callers-and-policy.md lists them. Each call returns a new slice.
func Methods() []string { return append([]string(nil), methods[:]...) }

// IsMethod reports whether m is one of Methods, spelled exactly (methods are
// case-sensitive). It does not allocate: the proxy calls it on every request.
func IsMethod(m string) bool {
	for _, x := range methods {
		if m == x {
			return true
		}
	}
	return false
}
