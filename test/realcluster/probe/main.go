// Command probe is the test program TestRealCluster runs in pods (a static binary in a
// one-file image built with internal/imagebuild):
//
//	probe serve ADDR MARKER_DIR   serve "probe <hostname>" over HTTP; on SIGTERM wait 2 s,
//	                              write MARKER_DIR/terminated and exit 0
//	probe get URL                 GET URL until it answers (60 s at most), print the body
//	probe write FILE TEXT         write TEXT to FILE, then sleep until SIGTERM
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: probe serve ADDR MARKER_DIR | get URL | write FILE TEXT")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2], os.Args[3])
	case "get":
		err = get(os.Args[2])
	case "write":
		if err = os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err == nil {
			waitTerm()
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func waitTerm() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

func serve(addr, marker string) error {
	host, _ := os.Hostname()
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "probe %s", host)
	})}
	go func() {
		waitTerm()
		time.Sleep(2 * time.Second) // a slow graceful shutdown the kubelet must wait for
		_ = os.WriteFile(filepath.Join(marker, "terminated"), []byte(time.Now().UTC().Format(time.RFC3339Nano)), 0o644)
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func get(url string) error {
	deadline := time.Now().Add(60 * time.Second)
	c := &http.Client{Timeout: 3 * time.Second}
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				fmt.Printf("%s\n", b)
				return nil
			}
			err = fmt.Errorf("status %d, %v", resp.StatusCode, rerr)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
