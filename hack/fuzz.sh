#!/usr/bin/env bash
# make fuzz: runs every Go fuzz target (func FuzzXxx in a _test.go file) for FUZZTIME each, one
# after another, and prints per target the executions, the new corpus entries (kept in Go's
# cache, $(go env GOCACHE)/fuzz) and the crashers. A crasher's input is written by go test to
# the package's testdata/fuzz/FuzzXxx/: fix the mechanism and commit it there as a regression
# seed (`make test` / `make unit` run every committed seed as a plain test). Exits non-zero if
# any target crashed or failed to run.
#
#   hack/fuzz.sh                        # = make fuzz (FUZZTIME=30s)
#   FUZZTIME=2m FUZZ=DHCP hack/fuzz.sh  # targets whose name matches the regexp FUZZ
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH=/usr/local/go/bin:$PATH
fuzztime=${FUZZTIME:-30s}
filter=${FUZZ:-.}

# "pkgdir name" per target, sorted.
mapfile -t targets < <(git ls-files '*_test.go' | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' |
  sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#./\1 \2#' | grep -E " .*${filter}" | sort)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no target matches FUZZ=$filter" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, $fuzztime each" >&2

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
failed=0
rows=()
for t in "${targets[@]}"; do
  pkg=${t% *} name=${t#* }
  out=$log/$name.log
  echo "fuzz: $pkg $name ..." >&2
  rc=0
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >"$out" 2>&1 || rc=$?
  # The last progress line: "fuzz: elapsed: 30s, execs: 123 (4/sec), new interesting: 5 (total: 9)".
  last=$(grep -E '^fuzz: elapsed: .*execs: ' "$out" | tail -1 || true)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  new=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
  crash=$(sed -nE 's/.*Failing input written to (.*)$/\1/p' "$out" | head -1)
  status=ok
  if [ -n "$crash" ]; then
    status="CRASHER $pkg/$crash"
    failed=1
  elif [ "$rc" != 0 ]; then
    status="FAILED (exit $rc)"
    failed=1
  fi
  if [ "$status" != ok ]; then
    sed 's/^/    /' "$out" | tail -40 >&2
  fi
  rows+=("$(printf '%-26s %-24s %12s %6s  %s' "$name" "$pkg" "${execs:-?}" "${new:-?}" "$status")")
done

printf '\n%-26s %-24s %12s %6s  %s\n' TARGET PACKAGE EXECUTIONS NEW RESULT
printf '%s\n' "${rows[@]}"
exit $failed
