"""A torch MLP on sealed data in attested mode (run by attested_test.sh from the job's folder).

Then, with the same released keys: one streamed epoch (SealedIterableDataset), a ring of
one keyed with the broker's job key, and configure_nccl (the plugin's init() succeeds).

The keys come from the broker, released to this interpreter and this file (the workload the
data-use policy approves) on a host attested with its TPM (swtpm); they stay in the package's
C++ core. Prints one JSON line: the validation accuracy, the lease and the export's digest.
    python3 attested_train.py TCTI STATE_DIR IMA_LOG
"""

import ctypes
import json
import sys

import torch

import enclave

tcti, state, ima_log = sys.argv[1:4]
session = enclave.Session.attested("job.toml", tcti=tcti, state=state, ima_log=ima_log, code=["attested_train.py"])
assert session.mode == "attested"
ds = enclave.SealedTensorDataset(session)
train_rows, val_rows = ds.stratified_split(0.2, 7)
xt, yt = (torch.from_dlpack(t) for t in ds.gather(train_rows))
xv, yv = (torch.from_dlpack(t) for t in ds.gather(val_rows))
mean, std = xt.mean(0), xt.std(0, unbiased=False).clamp_min(1e-12)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
for epoch in range(30):
    for x, y in enclave.torch_batches(ds, 32, shuffle=True, seed=epoch, rows=train_rows):
        loss = torch.nn.functional.cross_entropy(model((x - mean) / std), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    accuracy = float((model((xv - mean) / std).argmax(1) == yv).float().mean())
weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
digest = session.export(weights, "model.sealed", format="test-torch-mlp-params")
streamed = sum(len(y) for _, y in enclave.SealedIterableDataset(session, batch_size=64, window_chunks=1,
                                                                 shuffle=True, seed=1))
ring = session.ring(0, 1)  # the broker's job key; a ring of one meets nobody
one = torch.ones(3)
ring.all_reduce_sum(one.numpy())
plugin = session.configure_nccl()
table = (ctypes.c_void_p * 2).in_dll(ctypes.CDLL("libnccl-net-enclave.so"), "ncclNetPlugin_v11")
init = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_void_p,
                        ctypes.c_void_p, ctypes.c_void_p)(table[1])
ctx = ctypes.c_void_p()
print(json.dumps({"accuracy": accuracy, "job_id": session.job_id, "model_sha256": digest, "streamed_rows": streamed,
                  "ring_sum": one.tolist(), "nccl_plugin": plugin,
                  "plugin_init": init(ctypes.byref(ctx), 1, None, None, None)}))
session.close()
