"""Revocation mid-training (run by attested_test.sh): batches until the session ends.

Prints the job id, then reads batches until the lease keeper's renewal is refused (the
broker revoked the job) and the next batch raises SessionEnded; the tensors already handed
out must then hold zeros only (wiped in place). Prints one JSON line with what it saw.
    python3 attested_revoked.py TCTI STATE_DIR IMA_LOG
"""

import json
import sys
import time

import torch

import enclave

tcti, state, ima_log = sys.argv[1:4]
session = enclave.Session.attested("job.toml", tcti=tcti, state=state, ima_log=ima_log,
                                   code=["attested_revoked.py"])
ds = enclave.SealedTensorDataset(session)
held_x, held_y = (torch.from_dlpack(t) for t in ds.gather(list(range(64))))
assert float(held_x.abs().sum()) > 0
print(json.dumps({"job_id": session.job_id}), flush=True)
batches, ended = 0, None
deadline = time.time() + 120
while time.time() < deadline:
    try:
        for x, y in enclave.torch_batches(ds, 32, shuffle=True, seed=batches):
            batches += 1
            time.sleep(0.05)
    except enclave.SessionEnded as e:
        ended = str(e)
        break
print(json.dumps({"batches": batches, "ended": ended, "held_sum_after": float(held_x.abs().sum())}))
