#!/usr/bin/env bash
# Checks that everything generated or normalised is committed as its generator writes it:
# deepcopy code, CRDs and the controller's ClusterRole (hack/generate.sh), the launcher API's
# protobuf code (hack/genproto.sh), go.mod/go.sum (go mod tidy, both modules) and gofmt.
# Each step runs its generator on the work tree; a step whose run changed the tree fails with
# the files it changed and the command that fixes it. The regenerated files are left in place:
# commit them. On a clean tree (CI) it finally requires `git diff --exit-code` and no untracked
# files.
#
#   hack/verify.sh        # = make verify
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH=/usr/local/go/bin:$PATH

# snapshot prints every file that differs from HEAD or is untracked, with a hash of its
# content: two snapshots differ exactly in the files a step changed.
snapshot() {
  { git diff --name-only HEAD; git ls-files --others --exclude-standard; } | sort -u |
    while IFS= read -r f; do
      if [ -e "$f" ]; then echo "$f $(sha256sum <"$f" | cut -c1-16)"; else echo "$f deleted"; fi
    done
}

clean_at_start=0
[ -z "$(git status --porcelain --untracked-files=all)" ] && clean_at_start=1
if [ $clean_at_start = 0 ]; then
  echo "verify: the tree has uncommitted changes; judging only what the generators change" >&2
fi

failed=()
steps=5
n=0
# step NAME FIX CMD...: runs CMD, fails the step if it changed the tree.
step() {
  local name=$1 fix=$2; shift 2
  n=$((n + 1))
  echo "verify: [$n/$steps] $name..." >&2
  local before after start=$SECONDS files
  before=$(snapshot)
  # The generator's own output (e.g. "tools: installing ...") shows as it comes, indented, and
  # a line every 30 s says a long first run (building the tools: ≈2 min) is not hung.
  ( while sleep 30; do echo "verify: ... still running $name ($((SECONDS - start)) s)" >&2; done ) &
  local ticker=$! rc=0
  "$@" 2>&1 | sed -u 's/^/    /' >&2 || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if [ $rc != 0 ]; then
    echo "verify: FAIL $name: the generator itself failed (exit $rc, output above)" >&2
    failed+=("$name")
    return 0
  fi
  after=$(snapshot)
  if [ "$before" != "$after" ]; then
    files=$(comm -3 <(echo "$before") <(echo "$after") | awk 'NF {print $1}' | sort -u)
    echo "verify: FAIL $name: the committed files differ from what it generates:" >&2
    echo "$files" | sed 's/^/    /' >&2
    # shellcheck disable=SC2086 # one path a line, none with blanks
    git --no-pager diff HEAD -- $files | head -60 | sed 's/^/    | /' >&2
    echo "verify: fix: $fix, then commit the result" >&2
    failed+=("$name")
  else
    echo "verify: ok   $name ($((SECONDS - start)) s)" >&2
  fi
}

step "deepcopy, CRDs, RBAC (hack/generate.sh)" "make generate" bash hack/generate.sh
step "protobuf (hack/genproto.sh)" "make proto" bash hack/genproto.sh
step "go mod tidy" "go mod tidy" go mod tidy
# The nested module's go.mod/go.sum key the control-plane cache: check it without writing, so
# that a run of verify never invalidates the ≈10 min build.
tidy_controlplane() {
  (cd test/assets/controlplane && go mod tidy -diff)
}
n=$((n + 1))
echo "verify: [$n/$steps] go mod tidy (test/assets/controlplane, check only)..." >&2
start=$SECONDS
if out=$(tidy_controlplane 2>&1); then
  echo "verify: ok   go mod tidy (test/assets/controlplane) ($((SECONDS - start)) s)" >&2
else
  echo "$out" | head -40 >&2
  echo "verify: FAIL go mod tidy (test/assets/controlplane): not tidy (diff above)" >&2
  echo "verify: fix: cd test/assets/controlplane && go mod tidy, then commit (the next make assets rebuilds the control plane, ≈10 min)" >&2
  failed+=("go mod tidy (test/assets/controlplane)")
fi
gofmt_tree() {
  git ls-files -z '*.go' | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
    xargs -0 gofmt -w
}
step "gofmt" "make fmt" gofmt_tree

if [ ${#failed[@]} -gt 0 ]; then
  echo "verify: FAILED: ${failed[*]}" >&2
  exit 1
fi
if [ $clean_at_start = 1 ]; then
  if ! git diff --exit-code --stat >&2; then
    echo "verify: FAIL: the tree changed" >&2; exit 1
  fi
  if [ -n "$(git ls-files --others --exclude-standard)" ]; then
    echo "verify: FAIL: untracked files appeared:" >&2
    git ls-files --others --exclude-standard | sed 's/^/    /' >&2
    exit 1
  fi
fi
echo "verify: everything generated is up to date" >&2
