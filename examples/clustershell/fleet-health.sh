#!/bin/bash
# gpudiag's health check on many nodes at once with ClusterShell, identical outputs folded:
#
#     fleet-health.sh 'gpu[001-128]'                 # Nagios-style lines, exit the worst
#     fleet-health.sh 'gpu[001-128]' --for npd       # one line per node
#
# GPUDIAG: gpudiag's path on the nodes (default: gpudiag on PATH).
set -euo pipefail
nodes=${1:?usage: fleet-health.sh NODESET [HEALTH OPTIONS]}
shift
# -S: exit with the largest exit code of any node (2 critical, 3 unknown or unreachable)
clush -S -w "$nodes" "${GPUDIAG:-gpudiag}" health "$@" | clubak -c
