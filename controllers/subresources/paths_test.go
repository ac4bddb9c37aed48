package subresources

import "testing"

func TestParse(t *testing.T) {
	const p = prefix + "/namespaces/ns/virtualmachineinstances/vm/"
	for path, want := range map[string]string{
		p + "console": "console", p + "vnc": "vnc", p + "vnc/screenshot": "vnc", p + "portforward/22": "portforward",
		p + "qmp": "qmp", p + "qmplog": "qmplog",
		p + "portforward": "", p + "console/x": "", p + "vnc/other": "", prefix + "/namespaces/ns/pods/vm/console": "",
		prefix + "/namespaces//virtualmachineinstances/vm/console": "",
	} {
		r, ok := parse(path)
		if got := map[bool]string{true: r.sub}[ok]; got != want {
			t.Errorf("parse(%q) = %q, %v; want %q", path, r.sub, ok, want)
		}
		if ok && (r.ns != "ns" || r.name != "vm" || r.rest != path[len(prefix)+1:]) {
			t.Errorf("parse(%q) = %+v", path, r)
		}
	}
}
