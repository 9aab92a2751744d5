"""Data-parallel torch training over the job's encrypted ring (docs/pytorch.md, "DDP").

The gradients DistributedDataParallel exchanges go through ``Ring.all_reduce_sum``: the
project's encrypted ring (net/ring.h), keyed with the job communication key, which stays
in the C++ core. torch is imported only when these functions are called.
"""


def ring_allreduce_hook(ring, bucket):
    """A DDP communication hook: the bucket's gradients, averaged over the ranks.

    ``ddp.register_comm_hook(ring, enclave.ring_allreduce_hook)``. The all-reduce runs in
    the hook (synchronously, on the CPU): the returned future is already done.
    """
    import torch

    buf = bucket.buffer()
    ring.all_reduce_sum(buf.numpy())  # in place, over the encrypted ring
    buf.div_(ring.world_size)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def broadcast_parameters(module, ring, root=0):
    """Every rank's parameters and buffers become rank ``root``'s, over the ring.

    Not a broadcast on the wire: the other ranks contribute zeros to a sum (exact).
    """
    import torch

    tensors = [t for t in list(module.parameters()) + list(module.buffers()) if t.is_floating_point()]
    with torch.no_grad():
        for t in tensors:
            flat = t.detach().reshape(-1).clone()
            if ring.rank != root:
                flat.zero_()
            ring.all_reduce_sum(flat.numpy())
            t.copy_(flat.reshape(t.shape))


def distributed_data_parallel(module, ring, hook=ring_allreduce_hook, **kwargs):
    """``module`` as a DistributedDataParallel whose gradients go over the encrypted ring.

    The parameters and buffers are first made rank 0's over the ring; then DDP is built
    with ``broadcast_buffers=False`` (buffers are not sent over the process group at every
    forward) and :func:`ring_allreduce_hook` registered. The process group (gloo) must be
    initialised: DDP's constructor still checks the parameter shapes and broadcasts rank
    0's parameters over it (by then every rank has them already; they are the model's
    initial values, not records). ``hook`` wraps or replaces the ring's hook (it gets the
    ring as its state).
    """
    from torch.nn.parallel import DistributedDataParallel

    broadcast_parameters(module, ring)
    kwargs.setdefault("broadcast_buffers", False)
    ddp = DistributedDataParallel(module, **kwargs)
    ddp.register_comm_hook(ring, hook)
    return ddp
