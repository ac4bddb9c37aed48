package devices

import "testing"

func TestEvaluate(t *testing.T) {
	base := Baseline(BaselineOptions{Disks: []Disk{{Major: 7, Minor: 3}, {Major: 8, Minor: 0, ReadOnly: true}}})
	tests := []struct {
		name  string
		rules []Rule
		req   Request
		want  bool
	}{
		{"null rw", base, Request{CharDevice, 1, 3, ReadWrite}, true},
		{"null mknod", base, Request{CharDevice, 1, 3, Mknod}, false},
		{"kvm not in baseline", base, Request{CharDevice, 10, 232, Read}, false},
		{"tun", base, Request{CharDevice, 10, 200, ReadWrite}, true},
		{"pts wildcard", base, Request{CharDevice, 136, 42, ReadWrite}, true},
		{"block 1:3 is not char 1:3", base, Request{BlockDevice, 1, 3, Read}, false},
		{"disk rw", base, Request{BlockDevice, 7, 3, ReadWrite}, true},
		{"other loop", base, Request{BlockDevice, 7, 4, Read}, false},
		{"read-only disk read", base, Request{BlockDevice, 8, 0, Read}, true},
		{"read-only disk write", base, Request{BlockDevice, 8, 0, Write}, false},
		{"no access bits", base, Request{CharDevice, 1, 3, 0}, false},
		{"unknown access bit", base, Request{CharDevice, 1, 3, 8 | Read}, false},
		{"union across rules", []Rule{Allow(CharDevice, 10, Wildcard, Read), Allow(CharDevice, 10, 232, Write)},
			Request{CharDevice, 10, 232, ReadWrite}, true},
		{"deny wins over allow", []Rule{Allow(AllDevices, Wildcard, Wildcard, All), Deny(CharDevice, 10, 232, Write)},
			Request{CharDevice, 10, 232, ReadWrite}, false},
		{"deny of other bit", []Rule{Allow(AllDevices, Wildcard, Wildcard, All), Deny(CharDevice, 10, 232, Write)},
			Request{CharDevice, 10, 232, Read}, true},
		{"a matches block", []Rule{Allow(AllDevices, Wildcard, 0, Mknod)}, Request{BlockDevice, 9, 0, Mknod}, true},
		{"wildcard major exact minor", []Rule{Allow(AllDevices, Wildcard, 0, Mknod)}, Request{BlockDevice, 9, 1, Mknod}, false},
		{"runc mknod any", RuncDefaultRules(), Request{BlockDevice, 259, 7, Mknod}, true},
		{"runc no read of random block", RuncDefaultRules(), Request{BlockDevice, 259, 7, Read}, false},
		{"empty", nil, Request{CharDevice, 1, 3, Read}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Evaluate(tt.rules, tt.req); got != tt.want {
				t.Fatalf("Evaluate(%v) = %v, want %v", tt.req, got, tt.want)
			}
			// The compiled program decides the same, both with the rules compiled in and with
			// the allow rules given as grants instead.
			if got, err := decide(tt.rules, nil, tt.req); err != nil || got != tt.want {
				t.Fatalf("program(static) = %v, %v; want %v", got, err, tt.want)
			}
			var static, grants []Rule
			for _, r := range tt.rules {
				if r.Allow {
					grants = append(grants, r)
				} else {
					static = append(static, r)
				}
			}
			if got, err := decide(static, grants, tt.req); err != nil || got != tt.want {
				t.Fatalf("program(grants) = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
