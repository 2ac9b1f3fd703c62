package proxy_test

import (
	"testing"

	"github.com/faxgate/faxgate/internal/gatewaytest"
)

// paramBelowCallers: an extra route with a parameter where numbers.delete
// has its fixed "delete" segment. svc is allowed "*", never numbers.delete.
const paramBelowCallers = untrustedCallers + `
routes:
  extra:
    - { name: numbers.status, method: POST, path: "/v1/numbers/{numberId}/status" }
`

// TestParamRouteBelowSensitivePathIsRefused: /v1/numbers/delete/status lies
// below the sensitive route's path. It must be refused with 403 like every
// other path below it (contract section 3): an upstream that routes by
// prefix reads it as the delete. Matching it to an extra route through a
// parameter must not forward it.
func TestParamRouteBelowSensitivePathIsRefused(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: paramBelowCallers})
	runAttacks(t, g, []attack{
		{name: "below delete via parameter route", raw: post("/v1/numbers/delete/status", deleteBody),
			want: []reply{gw(403, "forbidden")}},
		{name: "below delete via parameter route, other case", raw: post("/V1/Numbers/DELETE/status/", deleteBody),
			want: []reply{gw(403, "forbidden")}},
		{name: "parameter route itself", raw: post("/v1/numbers/num_1001/status", deleteBody),
			want: []reply{relayed(404)}, forward: "/v1/numbers/num_1001/status"},
	})
}
