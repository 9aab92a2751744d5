"""The enclave Python package on a GPU host (issue 19 section 4), run by scripts/gpu-check.

    python3 gpu_check.py BIN SAMPLES OUT_JSON      (PYTHONPATH: the package; BIN: enclave-data)

Development mode throughout (a keystore; the attested flow is the CPU tests' business):
1. records: SealedTensorDataset(device="cuda") decrypts on the GPU and its rows, batches
   and labels equal the CPU dataset's; a tampered chunk raises IntegrityError; closing the
   session wipes the device rows a batch still points at and the next batch raises.
2. throughput: one MLP training loop over sealed rows on the GPU vs the same loop over
   the clear rows as a torch CUDA tensor (each epoch's rows permuted once, batches sliced:
   the same work), interleaved rounds, the median ratio (goal 0.98).
3. DDP over NCCL through the enclave plugin: two processes on GPU 0 with another
   NCCL_HOSTID each (two "hosts": P2P and SHM off, so NCCL's network carries every byte),
   keyed by Session.configure_nccl; their parameters vs one process on the same global
   batches; the NCCL log must show the plugin as the network. Then all-reduce bus
   bandwidth through the plugin vs NCCL's plaintext socket transport, same setup.
Exit 0 when every check passed, 1 otherwise, 2 with no GPU.
"""

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from passphrase_pipe import passphrase_fd, with_passphrase

RESULTS = {"checks": {}, "figures": {}}


def session(enclave, job, keystore):
    fd = passphrase_fd()
    try:
        return enclave.Session.development(job, keystore, fd)
    finally:
        os.close(fd)


def check(name, ok, detail):
    RESULTS["checks"][name] = {"ok": bool(ok), "detail": detail}
    print(f"{'ok' if ok else 'FAIL'}: {name}: {detail}", flush=True)


JOB = """name = "gpu-check"
seed = 7
device = "auto"
output_dir = "{out}"

[[datasets]]
id = "{id}"
path = "{sealed}"

[model]
hidden = [16]

[training]
epochs = 1
batch_size = 16
"""


def setup(bin_dir, samples, d):
    data = f"{bin_dir}/enclave-data"
    keystore = f"{d}/tenant.keystore"
    with_passphrase([data, "keystore", "init", "--keystore", keystore, "--passphrase-fd", "FD",
                         "--kdf-opslimit", "2", "--kdf-memlimit-mib", "19"])
    jobs = {}

    def seal(csv, label, dataset_id, extra):
        sealed = f"{d}/{dataset_id}.sealed"
        with_passphrase([data, "seal", "--csv", csv, "--label", label, "--dataset-id", dataset_id,
                             "--keystore", keystore, "--out", sealed, "--passphrase-fd", "FD"] + extra)
        job = f"{d}/{dataset_id}.toml"
        with open(job, "w") as f:
            f.write(JOB.format(out=f"{d}/out-{dataset_id}", id=dataset_id, sealed=sealed))
        jobs[dataset_id] = (job, sealed)

    seal(f"{samples}/breast_cancer_wisconsin.csv", "diagnosis", "breast-cancer",
         ["--positive", "malignant", "--suite", "aes-256-gcm"])
    synth = f"{d}/synth.csv"
    r = subprocess.run([data, "synth", "--rows", str(SYNTH_ROWS), "--features", str(SYNTH_FEATURES), "--seed", "5",
                        "--out", synth], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"enclave-data synth exited {r.returncode}: {r.stderr.strip()}")
    seal(synth, "y", "synth", ["--suite", "chacha20-poly1305"])
    os.remove(synth)
    return keystore, jobs


SYNTH_ROWS, SYNTH_FEATURES = 600_000, 32


def check_records(enclave, torch, keystore, jobs):
    job, sealed = jobs["breast-cancer"]
    s = session(enclave, job, keystore)
    cpu = enclave.SealedTensorDataset(s)
    gpu = enclave.SealedTensorDataset(s, device="cuda")
    rows = list(range(len(cpu)))
    xc, yc = (torch.from_dlpack(t) for t in cpu.gather(rows))
    xg, yg = (torch.from_dlpack(t) for t in gpu.gather(rows))
    check("records: device", xg.is_cuda and yg.is_cuda and gpu.device == "cuda:0" and yg.dtype == torch.int64,
          f"x on {xg.device}, y {yg.dtype} on {yg.device}, dataset device {gpu.device}")
    check("records: equal to the CPU's", torch.equal(xg.cpu(), xc) and torch.equal(yg.cpu(), yc),
          f"{len(rows)} rows x {cpu.features} features, decrypted on the GPU and on the CPU")
    same = True
    for (a, b), (c, e) in zip(enclave.torch_batches(cpu, 50, shuffle=True, seed=3, rank=1, world_size=2),
                              enclave.torch_batches(gpu, 50, shuffle=True, seed=3, rank=1, world_size=2)):
        same = same and c.is_cuda and torch.equal(c.cpu(), a) and torch.equal(e.cpu(), b)
    check("records: batches equal to the CPU's", same, "shuffled, rank 1 of 2, batch 50")

    # A tampered chunk: one ciphertext byte flipped (past the header), the GPU path refuses.
    bad = sealed + ".tampered"
    with open(sealed, "rb") as f:
        blob = bytearray(f.read())
    blob[len(blob) // 2] ^= 0x01
    with open(bad, "wb") as f:
        f.write(blob)
    bad_job = job.replace(".toml", "-tampered.toml")
    with open(job) as f, open(bad_job, "w") as g:
        g.write(f.read().replace(sealed, bad))
    s2 = session(enclave, bad_job, keystore)
    try:
        enclave.SealedTensorDataset(s2, device="cuda")
        check("records: a tampered chunk raises", False, "the tampered file was accepted")
    except enclave.IntegrityError as e:
        check("records: a tampered chunk raises", True, f"IntegrityError: {e}")
    s2.close()

    # The session's end: the epoch's device rows are wiped in place; the next batch raises.
    it = iter(enclave.torch_batches(gpu, 64, shuffle=True, seed=1))
    x0, _ = next(it)
    before = float(x0.abs().sum())
    s.close()
    torch.cuda.synchronize()
    after = float(x0.abs().sum())
    try:
        next(it)
        raised = "no exception"
    except enclave.SessionEnded as e:
        raised = f"SessionEnded: {e}"
    check("records: the session's end wipes the device rows", before > 0 and after == 0.0 and
          raised.startswith("SessionEnded"), f"a held batch's sum {before:.4g} -> {after:.4g}; next batch: {raised}")


def mlp(torch, features, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 2)).cuda()


def train_epochs(torch, net, batches_of_epoch, epochs):
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    rows = 0
    torch.cuda.synchronize()
    start = time.perf_counter()
    for epoch in range(epochs):
        for x, y in batches_of_epoch(epoch):
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            rows += x.shape[0]
    torch.cuda.synchronize()
    return rows / (time.perf_counter() - start)


def check_throughput(enclave, torch, keystore, jobs):
    job, _ = jobs["synth"]
    s = session(enclave, job, keystore)
    t0 = time.perf_counter()
    ds = enclave.SealedTensorDataset(s, device="cuda")
    torch.cuda.synchronize()
    sealed_load = time.perf_counter() - t0
    # The clear baseline's rows: the same records, decrypted on the CPU, as one CUDA tensor.
    cpu = enclave.SealedTensorDataset(s)
    cx, cy = (torch.from_dlpack(t).cuda() for t in cpu.gather(list(range(len(cpu)))))
    del cpu
    batch, epochs = 4096, 2

    def sealed_batches(epoch):
        return enclave.torch_batches(ds, batch, shuffle=True, seed=epoch)

    def clear_batches(epoch):
        g = torch.Generator(device="cuda").manual_seed(epoch)
        perm = torch.randperm(cx.shape[0], device="cuda", generator=g)
        ex, ey = cx[perm], cy[perm]  # the epoch's rows gathered once, as the package does
        return ((ex[i:i + batch], ey[i:i + batch]) for i in range(0, ex.shape[0], batch))

    train_epochs(torch, mlp(torch, SYNTH_FEATURES, 0), clear_batches, 1)  # warm-up: kernels, allocator
    train_epochs(torch, mlp(torch, SYNTH_FEATURES, 0), sealed_batches, 1)
    ratios, sealed_rates, clear_rates = [], [], []
    for _ in range(5):
        c = train_epochs(torch, mlp(torch, SYNTH_FEATURES, 0), clear_batches, epochs)
        e = train_epochs(torch, mlp(torch, SYNTH_FEATURES, 0), sealed_batches, epochs)
        clear_rates.append(c)
        sealed_rates.append(e)
        ratios.append(e / c)
    ratio = statistics.median(ratios)
    RESULTS["figures"]["throughput"] = {
        "rows": SYNTH_ROWS, "features": SYNTH_FEATURES, "batch": batch, "epochs_per_round": epochs,
        "model": f"MLP {SYNTH_FEATURES}-1024-1024-2, SGD momentum, fp32",
        "sealed_rows_per_s": sealed_rates, "clear_rows_per_s": clear_rates, "ratios": ratios,
        "median_ratio": ratio, "sealed_load_s": sealed_load}
    check("throughput: sealed vs clear", ratio >= 0.98,
          f"median ratio {ratio:.4f} over 5 interleaved rounds (goal 0.98); sealed {statistics.median(sealed_rates):,.0f} "
          f"rows/s, clear {statistics.median(clear_rates):,.0f} rows/s; batch {batch}; the sealed file "
          f"opened into GPU memory in {sealed_load:.2f} s")
    s.close()


# --- DDP over NCCL: the rank processes run this file with "rank" as the first argument ---

DDP_EPOCHS, DDP_BATCH, DDP_LR = 3, 16, 0.05
ALLREDUCE_BYTES, ALLREDUCE_ITERS = 256 << 20, 20


def ddp_model(torch, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(30, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).cuda()


def ddp_scaling(torch, enclave, ds):
    x, _ = (torch.from_dlpack(t) for t in ds.gather(list(range(len(ds)))))
    return x.mean(0), x.std(0, unbiased=False).clamp_min(1e-12)


def ddp_step(torch, net, opt, x, y, scale):
    mean, std = scale
    loss = torch.nn.functional.cross_entropy(net((x - mean) / std), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def flat(torch, net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).cpu()


def rank_main(mode, job, keystore, rank, world, port, out):
    import torch
    import torch.distributed as dist

    import enclave

    rank, world = int(rank), int(world)
    s = session(enclave, job, keystore)
    result = {"mode": mode}
    if mode == "enclave":
        result["plugin"] = s.configure_nccl()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", 0))
    if mode == "enclave":
        ds = enclave.SealedTensorDataset(s, device="cuda")
        scale = ddp_scaling(torch, enclave, ds)
        net = ddp_model(torch, 100 + rank)  # different per rank until DDP broadcasts rank 0's
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=DDP_LR, momentum=0.9)
        for epoch in range(DDP_EPOCHS):
            for x, y in enclave.torch_batches(ds, DDP_BATCH, shuffle=True, seed=epoch, rank=rank, world_size=world):
                ddp_step(torch, ddp, opt, x, y, scale)
        result["final"] = flat(torch, net).tolist()
    # All-reduce bus bandwidth (nccl-tests' definition: 2 (n-1)/n bytes / time).
    n = ALLREDUCE_BYTES // 4
    buf = torch.ones(n, dtype=torch.float32, device="cuda")
    for _ in range(3):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(ALLREDUCE_ITERS):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / ALLREDUCE_ITERS
    result["allreduce_s"] = seconds
    result["busbw_gb_s"] = 2 * (world - 1) / world * ALLREDUCE_BYTES / seconds / 1e9
    # Every element: 3 warm-ups and 20 timed sums of ones over 2 ranks -> 2^23.
    result["allreduce_exact"] = bool(torch.all(buf == float(world ** (3 + ALLREDUCE_ITERS))).item())
    dist.destroy_process_group()
    s.close()
    with open(out, "w") as f:
        json.dump(result, f)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(mode, job, keystore, d):
    port = free_port()
    procs, outs, logs = [], [], []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        env.update({"NCCL_HOSTID": f"enclave-gpu-check-host-{rank}", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                    "NCCL_NVLS_ENABLE": "0", "NCCL_SOCKET_IFNAME": "lo", "ENCLAVE_NET_IFNAME": "lo",
                    "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET",
                    "NCCL_DEBUG_FILE": f"{d}/{mode}.rank{rank}.nccl.log"})
        if mode == "socket":
            env.update({"NCCL_NET_PLUGIN": "none", "NCCL_NET": "Socket"})
        out = f"{d}/{mode}.rank{rank}.json"
        outs.append(out)
        logs.append(f"{d}/{mode}.rank{rank}.nccl.log")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "rank", mode, job, keystore,
                                       str(rank), "2", str(port), out], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    deadline = time.monotonic() + 120  # both ranks together: a hung rank must not eat the check's time
    for rank, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
        if p.returncode != 0 or not os.path.exists(outs[rank]):
            print(f"--- {mode} rank {rank} exited {p.returncode}:\n{text[-3000:]}", flush=True)
            results.append(None)
            continue
        with open(outs[rank]) as f:
            results.append(json.load(f))
    nccl_logs = []
    for path in logs:
        try:
            with open(path) as f:
                nccl_logs.append(f.read())
        except OSError:
            nccl_logs.append("")
    return results, nccl_logs


def nccl_version(torch):
    v = torch.cuda.nccl.version()  # a tuple in recent torch, an int (e.g. 22809) in older ones
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def check_ddp(enclave, torch, keystore, jobs, d):
    job, _ = jobs["breast-cancer"]
    enc, enc_logs = run_ranks("enclave", job, keystore, d)
    sock, sock_logs = run_ranks("socket", job, keystore, d)
    if None in enc:
        check("ddp: two ranks through the plugin", False, "a rank failed (its output is above)")
        return
    # Every rank's NCCL log: the plugin loaded and chosen, every channel through NET/enclave.
    used = all(re.search(r"Using network enclave", log) and re.search(r"via NET/enclave", log) and
               not re.search(r"via (P2P|SHM|NET/Socket|NET/IB)", log) for log in enc_logs)
    check("ddp: NCCL used the enclave plugin", used, "'Using network enclave' and every channel via NET/enclave "
          "in both ranks' NCCL logs")
    # The reference: one process, each global batch the two ranks' parts together.
    s = session(enclave, job, keystore)
    ds = enclave.SealedTensorDataset(s, device="cuda")
    scale = ddp_scaling(torch, enclave, ds)
    net = ddp_model(torch, 100)
    opt = torch.optim.SGD(net.parameters(), lr=DDP_LR, momentum=0.9)
    for epoch in range(DDP_EPOCHS):
        for (x0, y0), (x1, y1) in zip(
                enclave.torch_batches(ds, DDP_BATCH, shuffle=True, seed=epoch, rank=0, world_size=2),
                enclave.torch_batches(ds, DDP_BATCH, shuffle=True, seed=epoch, rank=1, world_size=2)):
            ddp_step(torch, net, opt, torch.cat([x0, x1]), torch.cat([y0, y1]), scale)
    want = flat(torch, net)
    s.close()
    finals = [torch.tensor(r["final"]) for r in enc]
    tol = 1e-5 * float(want.abs().max())
    diff = max(float((f - want).abs().max()) for f in finals)
    ranks_equal = torch.equal(finals[0], finals[1])
    check("ddp: two ranks over NCCL equal one process", ranks_equal and diff <= tol,
          f"max |rank - one process| {diff:.3g} (tolerance 1e-5 of the largest parameter: {tol:.3g}); "
          f"the two ranks {'bit-identical' if ranks_equal else 'differ'}; {DDP_EPOCHS} epochs, batch {DDP_BATCH} per rank")
    exact = all(r["allreduce_exact"] for r in enc) and all(r and r["allreduce_exact"] for r in sock)
    check("allreduce: sums exact", exact, "256 MiB of ones summed 23 times over 2 ranks, both transports")
    if None in sock:
        check("allreduce: socket baseline ran", False, "a socket rank failed (its output is above)")
        return
    sock_used = all(re.search(r"Using network Socket", log) and not re.search(r"NET/Enclave", log) for log in sock_logs)
    check("allreduce: the baseline used NCCL's socket transport", sock_used, "'Using network Socket', no plugin lines")
    e_bw = min(r["busbw_gb_s"] for r in enc)
    s_bw = min(r["busbw_gb_s"] for r in sock)
    RESULTS["figures"]["allreduce"] = {"bytes": ALLREDUCE_BYTES, "iters": ALLREDUCE_ITERS, "enclave_busbw_gb_s": e_bw,
                                       "socket_busbw_gb_s": s_bw, "ratio": e_bw / s_bw,
                                       "torch": torch.__version__, "nccl": nccl_version(torch)}
    print(f"figure: all-reduce {ALLREDUCE_BYTES >> 20} MiB, 2 NCCL hosts on one GPU: plugin {e_bw:.2f} GB/s busbw, "
          f"NCCL socket {s_bw:.2f} GB/s, ratio {e_bw / s_bw:.3f}", flush=True)


def main(bin_dir, samples, out_json):
    import torch

    import enclave

    if not torch.cuda.is_available():
        print("gpu_check.py: no GPU visible to torch: nothing checked")
        return 2
    if not enclave.CUDA:
        print("gpu_check.py: this enclave package was built without CUDA")
        return 1
    RESULTS["gpu"] = torch.cuda.get_device_name(0)
    RESULTS["torch"] = torch.__version__
    with tempfile.TemporaryDirectory(prefix="enclave-gpu-py-") as d:
        keystore, jobs = setup(bin_dir, samples, d)
        for name, fn in (("records", lambda: check_records(enclave, torch, keystore, jobs)),
                         ("throughput", lambda: check_throughput(enclave, torch, keystore, jobs)),
                         ("ddp", lambda: check_ddp(enclave, torch, keystore, jobs, d))):
            try:
                fn()
            except Exception as e:  # one part failing must not hide the others' results
                check(f"{name}: ran", False, f"{type(e).__name__}: {e}")
        for name in os.listdir(d):  # the NCCL logs travel with the results
            if name.endswith(".nccl.log"):
                with open(f"{d}/{name}") as f:
                    RESULTS.setdefault("nccl_logs", {})[name] = f.read()[-20000:]
    with open(out_json, "w") as f:
        json.dump(RESULTS, f, indent=1)
    failed = [k for k, v in RESULTS["checks"].items() if not v["ok"]]
    print(f"gpu_check.py: {len(RESULTS['checks']) - len(failed)} checks passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        rank_main(*sys.argv[2:])
    else:
        sys.exit(main(*sys.argv[1:]))
