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
