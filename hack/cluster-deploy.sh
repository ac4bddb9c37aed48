#!/usr/bin/env bash
# The deploy step of `make cluster-up` (cmd/vmlet-cluster up runs it once the node is Ready):
# deploy vmlet on the cluster ONLY through `kubectl apply -k config/...`, wait until the
# controller and the agent are Ready, and boot a sample VMI.
#
# Owned by the `clusterrun` work (issue 16 part 6); the cluster side (test/realcluster) only
# calls it. Environment it gets:
#   KUBECONFIG          admin kubeconfig (/var/lib/vmlet-cluster/kubeconfig)
#   KUBECTL             the kubectl built with the control plane
#   CTR_ADDRESS         the cluster's containerd socket, for
#                       `ctr --address "$CTR_ADDRESS" -n k8s.io images import FILE`
#   VMLET_CLUSTER_NODE  the node's name
# Progress goes to stderr; a non-zero exit fails `make cluster-up` (the cluster stays up).
set -euo pipefail
echo "cluster-deploy: nothing to deploy yet (hack/cluster-deploy.sh is a placeholder for vmlet's kustomize deploy)" >&2
