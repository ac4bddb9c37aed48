package devices

// Evaluate is the reference decision for req under rules, in plain Go. The compiled program
// (static rules plus grants map) must decide every request exactly like Evaluate over the
// union of the static rules and the grants; the fuzz and kernel tests hold it to that.
//
//   - A deny rule matching the device that names any of req's access bits denies.
//   - Otherwise req is allowed when the allow rules matching the device together grant all of
//     its access bits (union, so "r" from one rule and "w" from another allow an O_RDWR open).
//   - A request with no access bits is denied.
//
// runc's and cgroup-v1's programs differ in one corner: they need a single rule to cover all
// requested bits. The two agree whenever no device gets "r" and "w" from different rules, which
// holds for RuncDefaultRules and Baseline.
func Evaluate(rules []Rule, req Request) bool {
	if req.Access == 0 {
		return false
	}
	var granted Access
	for _, r := range rules {
		if !r.Matches(req) {
			continue
		}
		if !r.Allow {
			if r.Access&req.Access != 0 {
				return false
			}
			continue
		}
		granted |= r.Access
	}
	return req.Access&^granted == 0
}
