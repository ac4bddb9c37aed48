package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
)

// graceEnv overrides the default of --grace-period.
const graceEnv = "VMLET_GRACE_PERIOD"

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// run parses flags, runs the launcher until its domain ends (or SIGTERM/SIGINT with no
// domain), and returns the exit status (launcher.Exit* constants).
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("vmlet-launcher", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runDir := fs.String("run-dir", "", "the launcher's run folder (required); sockets and logs go under it")
	name := fs.String("name", "", "the domain name Sync must use (empty: any)")
	grace := fs.Duration("grace-period", 0, "how long SIGTERM lets the guest power off before QEMU is quit (default "+
		launcher.DefaultGracePeriod.String()+", or $"+graceEnv+")")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	qemuBin := fs.String("qemu", "", "QEMU binary (default qemu-system-x86_64 from PATH)")
	agentPing := fs.Duration("agent-ping-interval", 0, "how often a connected guest agent is pinged (default 5s)")
	agentRetry := fs.Duration("agent-retry-max", 0, "longest back-off between guest agent connection attempts (default 5s)")
	hold := fs.Bool("hold", false, "do nothing until SIGTERM or SIGINT, then exit 0 (the container of a hotplug attachment pod, which only holds a claim)")
	if err := fs.Parse(args); err != nil {
		return launcher.ExitUsage
	}
	if *hold {
		return holdUntilSignal()
	}
	if fs.NArg() > 0 || *runDir == "" {
		fmt.Fprintln(stderr, "vmlet-launcher: --run-dir is required and no arguments are taken")
		fs.Usage()
		return launcher.ExitUsage
	}
	if *grace == 0 {
		if v := os.Getenv(graceEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				fmt.Fprintf(stderr, "vmlet-launcher: $%s: %v\n", graceEnv, err)
				return launcher.ExitUsage
			}
			*grace = d
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "vmlet-launcher: --log-level: %v\n", err)
		return launcher.ExitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	// Everything the launcher (and QEMU, which inherits it) creates is private.
	syscall.Umask(0o077)
	// One launcher runs per VM and idles most of its life: a small heap target keeps its RSS
	// down (≈2 MiB less than Go's default) for a negligible CPU cost. $GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	// Its work is answering one RPC or QMP message at a time: on one P a goroutine hand-off
	// (gRPC reader → handler → QMP reader → handler) needs no wake-up of another thread, which
	// took a pause + resume through the launcher from 1.56 to 1.43 ms here (BenchmarkPauseRTT,
	// BENCHMARKS.md). $GOMAXPROCS still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}

	l, err := launcher.New(launcher.Config{
		RunDir: *runDir, Name: *name, GracePeriod: *grace, Logger: log, QEMUBinary: *qemuBin,
		AgentPingInterval: *agentPing, AgentRetryMax: *agentRetry,
	})
	if err != nil {
		log.Error("bad configuration", "err", err)
		return launcher.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ex, err := l.Run(ctx)
	if err != nil {
		var se *launcher.StepError
		if errors.As(err, &se) {
			log.Error("launcher failed", "step", se.Step, "err", se.Err)
		} else {
			log.Error("launcher failed", "err", err)
		}
	}
	log.Info("launcher exit", "code", ex.Code, "reason", ex.Reason, "detail", ex.Detail)
	return ex.Code
}

// holdUntilSignal waits for SIGTERM or SIGINT and returns 0: an attachment pod's container,
// whose pod exists to keep a claim mounted on the node (launcherpod.BuildAttachment).
func holdUntilSignal() int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
	return 0
}
