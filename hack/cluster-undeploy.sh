#!/usr/bin/env bash
# Undoes hack/cluster-deploy.sh on a running cluster, for `make cluster-down` to call before it
# stops the daemons: deletes every VMI (their node agent shuts each guest down and removes its
# run and storage folders while it still runs), then `kubectl delete -k config/realcluster`, then
# the test guest's image sources and vmlet's image cache on the node. Without it a stopped
# cluster leaves each VMI's /var/lib/vmlet/volumes/<uid> behind (the agent is killed with the
# kubelet's pods). Progress on stderr; a cluster with nothing deployed is fine.
#
#   KUBECONFIG=... [KUBECTL=...] hack/cluster-undeploy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "cluster-undeploy: $*" >&2; }
: "${KUBECONFIG:?KUBECONFIG must name the kubeconfig of the cluster}"
export KUBECONFIG
state=${VMLET_NODE_STATE:-/var/lib/vmlet}
kubectl=${KUBECTL:-$(command -v kubectl || ls -d "${VMLET_CACHE:-$HOME/.cache/vmlet}"/controlplane/*/kubectl 2>/dev/null | tail -n1)}
[ -x "$kubectl" ] || { say "no kubectl (set KUBECTL)"; exit 1; }

if "$kubectl" get crd virtualmachineinstances.vmlet.dev >/dev/null 2>&1; then
  say "deleting every VMI (their agent cleans the node)..."
  "$kubectl" delete vmi --all -A --wait --timeout=3m >&2
fi
say "kubectl delete -k config/realcluster..."
"$kubectl" delete -k config/realcluster --ignore-not-found --wait --timeout=3m >&2
rm -rf "${state:?}/sources" "$state/images"
for d in "$state/volumes" /var/run/vmlet/launchers; do
  if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then
    say "left in $d: $(ls -A "$d" | tr '\n' ' ')"
    exit 1
  fi
done
say "vmlet removed from the cluster"
