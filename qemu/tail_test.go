package qemu

import (
	"bytes"
	"strings"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	var sink bytes.Buffer
	tb := newTailBuffer(8, &sink)
	for _, s := range []string{"abc", "defg", "hij", strings.Repeat("x", 3)} {
		if n, err := tb.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := tb.String(); got != "fghijxxx" {
		t.Fatalf("tail = %q, want %q", got, "fghijxxx")
	}
	if n, err := tb.Write([]byte("0123456789AB")); n != 12 || err != nil {
		t.Fatalf("Write(long) = %d, %v", n, err)
	}
	if got := tb.String(); got != "456789AB" {
		t.Fatalf("tail after a long write = %q", got)
	}
	if sink.String() != "abcdefghijxxx0123456789AB" {
		t.Fatalf("sink = %q, want everything", sink.String())
	}
}

func TestReverter(t *testing.T) {
	var order []int
	func() {
		r := &reverter{}
		defer r.fail()
		r.add(func() { order = append(order, 1) })
		r.add(func() { order = append(order, 2) })
	}()
	if len(order) != 2 || order[0] != 2 || order[1] != 1 {
		t.Fatalf("undo order = %v, want [2 1]", order)
	}
	order = nil
	func() {
		r := &reverter{}
		defer r.fail()
		r.add(func() { order = append(order, 1) })
		r.success()
	}()
	if order != nil {
		t.Fatalf("undo ran after success: %v", order)
	}
}
