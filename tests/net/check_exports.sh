#!/bin/sh
# The plugin exports exactly the NCCL tables (v11, and v10..v6 for older NCCL releases)
# and the two job-key functions; everything else, the statically linked crypto included,
# stays hidden.
set -eu
got=$(nm -D --defined-only "$1" | awk '{print $3}' | LC_ALL=C sort | tr '\n' ' ')
want="enclave_net_clear_job_key enclave_net_set_job_key ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v6 ncclNetPlugin_v7 ncclNetPlugin_v8 ncclNetPlugin_v9 "
if [ "$got" != "$want" ]; then
  echo "exported: $got"
  echo "expected: $want"
  exit 1
fi
echo "exports ok: $got"
