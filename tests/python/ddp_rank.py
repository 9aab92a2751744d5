"""One rank of test_ddp: DistributedDataParallel over the encrypted ring (development mode).

    ddp_rank.py JOB KEYSTORE PASSPHRASE_FD RANK WORLD RENDEZVOUS GLOO_PORT OUT RING_TIMEOUT_S

Writes OUT (torch.save): the parameters after the broadcast over the ring, the final
parameters, the first gradient bucket as this rank computed it and as the ring summed it,
and the ring's bytes sent; or, when joining the ring fails, {"ring_error": message}.
"""

import sys

import torch
import torch.distributed as dist

import ddp_common as common
import enclave


def main(job, keystore, fd, rank, world, rendezvous, port, out, timeout_s):
    rank, world = int(rank), int(world)
    s = enclave.Session.development(job, keystore, int(fd))
    try:
        ring = s.ring(rank, world, rendezvous=rendezvous, timeout_s=float(timeout_s))
    except enclave.Error as e:
        torch.save({"ring_error": str(e)}, out)
        return
    ds = enclave.SealedTensorDataset(s)
    scale = common.scaling(ds)
    net = common.model(seed=100 + rank)  # different on every rank until the broadcast
    enclave.broadcast_parameters(net, ring)
    broadcast = common.flat(net).clone()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    first = {}

    def recording_hook(state, bucket):  # the first bucket, before and after the ring's sum
        if not first:
            first["local"] = bucket.buffer().clone()
        fut = enclave.ring_allreduce_hook(state, bucket)
        if "summed" not in first:
            first["summed"] = bucket.buffer().clone() * world
        return fut

    ddp = enclave.distributed_data_parallel(net, ring, hook=recording_hook)
    opt = common.optimizer(ddp.parameters())
    for epoch in range(common.EPOCHS):
        for x, y in common.batches(ds, epoch, rank, world):
            common.step(ddp, opt, x, y, scale)
    torch.save({"broadcast": broadcast, "final": common.flat(net), "first": first, "bytes_sent": ring.bytes_sent},
               out)
    dist.destroy_process_group()
    s.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
