package qemu

import (
	"slices"
	"testing"
)

func TestSandboxArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *Sandbox
		want []string // the -sandbox pair BuildArgv emits; nil: none
	}{
		{"unset (golden tests, callers of BuildArgv)", nil, nil},
		{"zero value is on with every group denied", &Sandbox{},
			[]string{"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"}},
		{"off", &Sandbox{Off: true}, []string{"-sandbox", "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := baseSpec()
			args, err := BuildArgv(&spec, Env{Accel: tcgHost, FDs: FDs{QMP: 3}, Sandbox: tc.s})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.Index(args, "-sandbox")
			if tc.want == nil {
				if i >= 0 {
					t.Fatalf("argv has -sandbox %s, want none", args[i+1])
				}
				return
			}
			if i < 0 || !slices.Equal(args[i:i+2], tc.want) {
				t.Fatalf("argv %q, want %q in it", args, tc.want)
			}
			if slices.Index(args[i+1:], "-sandbox") >= 0 {
				t.Fatalf("-sandbox given twice: %q", args)
			}
		})
	}
}
