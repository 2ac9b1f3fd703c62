package config

import "github.com/faxgate/faxgate/policy/routetable"

// BuiltinRoutes returns the built-in route table (routetable.Builtin, the
// single source of it) as routes of the configuration, auth first, so that
// it can be listed with routes.extra. Each call returns a new slice.
func BuiltinRoutes() []Route {
	b := routetable.Builtin()
	rs := make([]Route, len(b))
	for i, r := range b {
		rs[i] = Route(r)
	}
	return rs
}
