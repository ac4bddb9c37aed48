#!/usr/bin/env bash
# Deploys vmlet onto the running single-node cluster of `make cluster-up` and boots a sample VMI:
# the hook cluster-up calls once its cluster answers and vmlet's images are imported into the
# node's containerd. Only `kubectl apply -k config/realcluster` deploys vmlet (CRDs, RBAC, the
# controller Deployment, the agent DaemonSet); then it waits until both roll out Ready, applies
# config/samples/vmi-demo.yaml and waits for it Running with its guest booted (the guest agent
# connected: AgentConnected=True). Progress on stderr; idempotent (apply, then wait again).
#
#   KUBECONFIG=... hack/cluster-deploy.sh
#
# Environment (cmd/vmlet-cluster up sets the first three): KUBECONFIG (admin); KUBECTL names
# kubectl (default: the one on PATH, else the control plane build's in $VMLET_CACHE);
# CTR_ADDRESS, the nodes' containerd sockets (space-separated): when set, vmlet's images
# (hack/images.sh) are imported into each first (ctr -n k8s.io images import), else they must be
# there already (the e2e tests import them themselves). The cluster's nodes reach no registry:
# each node's agent serves the test guest's images from OCI layouts (hack/local-images.sh) copied
# under its state folder, which config/realcluster's --image flags name; VMLET_NODE_STATE lists
# those folders as this machine sees them (space-separated, default /var/lib/vmlet: a second
# node of test/realcluster has its own). SAMPLE=none skips the sample VMI; TIMEOUT (seconds,
# default 300) bounds each wait.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "cluster-deploy: $*" >&2; }
: "${KUBECONFIG:?KUBECONFIG must name the kubeconfig of the cluster}"
export KUBECONFIG
timeout=${TIMEOUT:-300}
sample=${SAMPLE:-config/samples/vmi-demo.yaml}
states=${VMLET_NODE_STATE:-/var/lib/vmlet}

kubectl=${KUBECTL:-}
if [ -z "$kubectl" ]; then
  kubectl=$(command -v kubectl || true)
fi
if [ -z "$kubectl" ]; then
  kubectl=$(ls -d "${VMLET_CACHE:-$HOME/.cache/vmlet}"/controlplane/*/kubectl 2>/dev/null | tail -n1 || true)
fi
[ -x "$kubectl" ] || { say "no kubectl (set KUBECTL)"; exit 1; }

if [ -n "${CTR_ADDRESS:-}" ]; then
  images=$(hack/images.sh | tail -n1)
  for addr in $CTR_ADDRESS; do
    say "vmlet's images (hack/images.sh) into containerd $addr..."
    for f in vmlet.tar vmlet-launcher.tar; do
      ctr --address "$addr" -n k8s.io images import "$images/$f" >&2
    done
  done
fi

# The flags name oci:<layout>:<tag>; copy each layout the overlay serves (testguest,
# testguest-disk, alpine-kernel-boot: the stand-ins for KubeVirt's example images too) where each
# node's agent's hostPath shows it. Replacing an older copy is idempotent.
layouts=$(hack/local-images.sh | sed -e 's/^--image=[^=]*=oci://' -e 's/:[^:/]*$//' | sort -u)
for state in $states; do
  say "test guest images (hack/local-images.sh) into $state/sources..."
  sources=$state/sources
  mkdir -p "$sources"
  for layout in $layouts; do
    name=$(basename "$layout")
    rm -rf "$sources/$name.new"
    cp -a "$layout" "$sources/$name.new"
    rm -rf "${sources:?}/$name"
    mv "$sources/$name.new" "$sources/$name"
  done
done

say "kubectl apply -k config/realcluster..."
# CRDs first become Established; the apply of the rest can race it on a fresh cluster, so a
# failed first apply is retried once the CRDs are there.
if ! "$kubectl" apply -k config/realcluster >&2; then
  "$kubectl" wait --for=condition=Established --timeout="${timeout}s" \
    crd/virtualmachineinstances.vmlet.dev crd/virtualmachineinstancemigrations.vmlet.dev >&2
  "$kubectl" apply -k config/realcluster >&2
fi
say "waiting for the controller and the agent to be Ready..."
"$kubectl" -n vmlet-system rollout status deployment/vmlet-controller --timeout="${timeout}s" >&2
"$kubectl" -n vmlet-system rollout status daemonset/vmlet-agent --timeout="${timeout}s" >&2

if [ "$sample" = none ]; then
  say "vmlet deployed (no sample VMI)"
  exit 0
fi
name=$("$kubectl" create --dry-run=client -o jsonpath='{.metadata.name}' -f "$sample")
say "sample VMI $name ($sample)..."
"$kubectl" apply -f "$sample" >&2
"$kubectl" wait --for=jsonpath='{.status.phase}'=Running --timeout="${timeout}s" "vmi/$name" >&2
say "waiting for its guest to boot (guest agent connected)..."
"$kubectl" wait --for=condition=AgentConnected --timeout="${timeout}s" "vmi/$name" >&2
"$kubectl" get vmi "$name" -o wide >&2
"$kubectl" get pods -A -o wide >&2
say "ready: vmlet deployed, VMI $name booted"
