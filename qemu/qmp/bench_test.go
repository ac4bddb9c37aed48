package qmp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// BenchmarkStopCont measures one stop + cont round trip pair through Monitor.Execute against a
// real QEMU (TCG). Compare with BenchmarkRawSocketStopCont for the client's overhead.
func BenchmarkStopCont(b *testing.B) {
	q := startQEMU(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := qmp.Dial(ctx, q.Sock, qmp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if err := m.Execute(ctx, "cont", nil, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Execute(ctx, "stop", nil, nil); err != nil {
			b.Fatal(err)
		}
		if err := m.Execute(ctx, "cont", nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawSocketStopCont is the floor: the same commands hand-written to a bare socket,
// reading lines until the reply (skipping the STOP/RESUME events), no JSON decoding.
func BenchmarkRawSocketStopCont(b *testing.B) {
	q := startQEMU(b)
	conn, err := net.Dial("unix", q.Sock)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 256<<10)
	if _, err := r.ReadBytes('\n'); err != nil { // greeting
		b.Fatal(err)
	}
	id := 0
	roundTrip := func(cmd string) {
		id++
		if _, err := fmt.Fprintf(conn, `{"execute":%q,"id":"%d"}`+"\n", cmd, id); err != nil {
			b.Fatal(err)
		}
		want := fmt.Appendf(nil, `"id": "%d"`, id)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				b.Fatal(err)
			}
			if bytes.Contains(line, want) {
				if !bytes.Contains(line, []byte(`"return"`)) {
					b.Fatalf("%s: %s", cmd, line)
				}
				return
			}
		}
	}
	roundTrip("qmp_capabilities")
	roundTrip("cont")
	b.ReportAllocs()
	for b.Loop() {
		roundTrip("stop")
		roundTrip("cont")
	}
}
