package policy

// routeNumbersDelete is the built-in route whose audit line always names
// the number it deleted.
const routeNumbersDelete = "numbers.delete"

// AuditCarriesIDs reports whether the audit line of a request to route,
// whose Base decision is base, carries the number_id and order_id of its
// body. Only a sensitive route has an audit line. Its IDs are what an
// auditor needs to know which number went: numbers.delete's line carries
// them even when the route is not in policy.confirm, and so does the line
// of every confirmed route, whose check reads them anyway
// (docs/logs.md, Audit lines).
func AuditCarriesIDs(route string, base Decision) bool {
	return base.Sensitive && (route == routeNumbersDelete || base.Confirm)
}
