#!/usr/bin/env bash
# make unit: the tests that need no QEMU, no API server and no root, in well under a minute warm.
#
# Selection: `go test -short`. Every guard in test/prereq (Root, QEMU, KVM, APIServer) and
# testguest.Assets skip their test under -short, and test/apienv refuses to start an API server
# (ErrShort), so exactly the tests that use none of them run; each one left out prints a SKIP
# line saying what it needs, and the summary counts them. Run as root, the tests run without
# any capability (setpriv), so a privileged test that lacks its guard fails here instead of
# quietly using root. `make test` never passes -short (and fails under CI=true on any skip but
# KVM's), so nothing that this selection leaves out is ever left out of `make test`.
#
#   hack/unit.sh                       # = make unit
#   PKGS=./qemu/... hack/unit.sh
#   UNIT_FLAGS='-count=1 -run TestX -v' hack/unit.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH=/usr/local/go/bin:$PATH
pkgs=${PKGS:-./...}
# Go's test cache is on: a rerun repeats only the packages whose code (or read files) changed.
# UNIT_FLAGS=-count=1 runs everything again.
flags=${UNIT_FLAGS:--timeout 5m}

run=()
how="as $(id -un)"
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv >/dev/null; then
    run=(setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all --)
    how="as root without capabilities"
  else
    how="as root WITH capabilities (setpriv from util-linux missing: unguarded privileged tests go unnoticed)"
  fi
fi
go build -o "$root/bin/testreport" ./hack/testreport
echo "unit: go test -short $flags $pkgs $how (progress: one line per finished test)" >&2
# shellcheck disable=SC2086 # flags and pkgs are word lists
"${run[@]}" go test -short $flags -json $pkgs | "$root/bin/testreport" -short
