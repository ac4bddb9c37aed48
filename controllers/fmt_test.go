package controllers

import (
	"fmt"

	"github.com/vmlet/vmlet/qemu"
)

func fmtSpec(s *qemu.Spec) string {
	out := fmt.Sprintf("%+v", *s)
	if s.Serial != nil {
		out += fmt.Sprintf(" serial=%+v", *s.Serial)
	}
	return out
}
