package optstest

import "strings"

// Parse splits an option string as QEMU does: ',' separates, ",," is a literal comma, the first
// '=' splits key and value, and a first part without '=' is the implied key "". It returns the
// values by key and the keys in order (a repeated key appears twice in keys).
func Parse(s string) (vals map[string]string, keys []string) {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ',' && i+1 < len(s) && s[i+1] == ',':
			cur.WriteByte(',')
			i++
		case s[i] == ',':
			parts, cur = append(parts, cur.String()), strings.Builder{}
		default:
			cur.WriteByte(s[i])
		}
	}
	parts = append(parts, cur.String())
	vals = map[string]string{}
	for i, p := range parts {
		k, v, ok := strings.Cut(p, "=")
		if !ok && i == 0 {
			k, v = "", p
		}
		vals[k] = v
		keys = append(keys, k)
	}
	return vals, keys
}
