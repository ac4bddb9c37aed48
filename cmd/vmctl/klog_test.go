package main

import (
	"context"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestClientGoQuiet: once vmctl runs, what client-go logs through klog (a reflector's warning
// that its watch ended, printed after every migrate --wait before) reaches no stream.
func TestClientGoQuiet(t *testing.T) {
	if code := run(context.Background(), newCLI(nil, io.Discard, io.Discard), []string{"--help"}); code != exitOK {
		t.Fatalf("vmctl --help: exit %d", code)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	klog.Warning("watch ended with error (vmctl test)")
	klog.Flush()
	os.Stderr = stderr
	w.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Errorf("client-go's log reached stderr: %q", got)
	}
}
