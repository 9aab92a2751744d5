#!/bin/sh
# The plugin exports exactly the NCCL table and the two job-key functions; everything
# else, the statically linked crypto included, stays hidden.
set -eu
got=$(nm -D --defined-only "$1" | awk '{print $3}' | sort | tr '\n' ' ')
want="enclave_net_clear_job_key enclave_net_set_job_key ncclNetPlugin_v11 "
if [ "$got" != "$want" ]; then
  echo "exported: $got"
  echo "expected: $want"
  exit 1
fi
echo "exports ok: $got"
