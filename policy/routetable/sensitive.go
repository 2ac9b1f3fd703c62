package routetable

import (
	"strconv"
	"strings"

	"github.com/faxgate/faxgate/internal/base/ascii"
)

// Overlap is how the path pattern of a route relates to the path pattern
// of a sensitive route. Sensitivity follows the path (docs/security.md,
// Nothing below a sensitive route): a route that is not sensitive must not
// take request paths of a sensitive route, nor paths below them, except
// where it was configured below the sensitive route's own pattern.
// Configuration validation refuses TakesPaths; policy refuses the request
// paths of ReachesBelow that lie below the sensitive route's path.
type Overlap int

const (
	// Apart: the route takes none of the sensitive route's request paths
	// and matches no path below them by accident. A parameter route such
	// as /v1/{a}/{b} matches /v1/numbers/delete, but the router prefers
	// the fixed segments of numbers.delete there.
	Apart Overlap = iota
	// SamePath: the same pattern, letter case and parameter names aside.
	SamePath
	// TakesPaths: as many segments, agreeing wherever both are fixed, and
	// at the first position where one has a parameter and the other a
	// fixed segment the route has the fixed one, which the router
	// prefers: it takes some of the sensitive route's request paths
	// (/v1/faxes/inbox beside a sensitive /v1/faxes/{faxId}).
	TakesPaths
	// Below: more segments, the first ones the sensitive pattern itself
	// (/v1/numbers/delete/preview below /v1/numbers/delete): configured
	// below it on purpose.
	Below
	// ReachesBelow: more segments, the first ones agreeing with the
	// sensitive pattern wherever both are fixed, but with a parameter
	// where it has a fixed segment or the other way round
	// (/v1/numbers/{numberId}/status and /v1/numbers/delete): the route
	// matches request paths below the sensitive route's path by accident.
	ReachesBelow
)

// OverlapOf says how the route path pattern other relates to the route
// path pattern sensitive. Both are route paths as configured ("/v1/" then
// segments, fixed or {param}); fixed segments compare ignoring ASCII
// letter case, as the router matches them.
func OverlapOf(sensitive, other string) Overlap {
	s, o := strings.Split(sensitive, "/"), strings.Split(other, "/")
	if len(o) < len(s) {
		return Apart
	}
	// differ: the patterns differ in kind somewhere (a parameter against a
	// fixed segment); otherFixed: at the first such position, other has
	// the fixed segment.
	differ, otherFixed := false, false
	for i, a := range s {
		b := o[i]
		_, ap := ParamName(a)
		_, bp := ParamName(b)
		switch {
		case ap && bp:
		case !ap && !bp:
			if !ascii.EqualFold(a, b) {
				return Apart
			}
		case !differ:
			differ, otherFixed = true, ap
		}
	}
	switch {
	case len(o) == len(s) && !differ:
		return SamePath
	case len(o) == len(s) && otherFixed:
		return TakesPaths
	case len(o) == len(s):
		return Apart
	case !differ:
		return Below
	default:
		return ReachesBelow
	}
}

// String returns the constant's name.
func (o Overlap) String() string {
	switch o {
	case Apart:
		return "Apart"
	case SamePath:
		return "SamePath"
	case TakesPaths:
		return "TakesPaths"
	case Below:
		return "Below"
	case ReachesBelow:
		return "ReachesBelow"
	}
	return "Overlap(" + strconv.Itoa(int(o)) + ")"
}
