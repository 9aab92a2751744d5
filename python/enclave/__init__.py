"""enclave: train on sealed data with the keys behind attestation (docs/pytorch.md).

The keys and the decrypted records stay in the C++ core, in locked memory (or, for a
dataset made with ``device="cuda"``, in GPU memory, decrypted there). Python sees
records only as DLPack tensors over that memory: ``torch.from_dlpack(t)`` (or JAX's and
CuPy's) wraps them without a copy. When the session ends (``close()``, the lease's end,
a revocation) every buffer it handed out is wiped in place and every later call raises
``SessionEnded``.

    session = enclave.Session.attested("job.toml")          # TPM, broker, lease
    data = enclave.SealedTensorDataset(session)               # authenticated, decrypted
    for x, y in enclave.torch_batches(data, 32, shuffle=True, seed=epoch):
        ...

Also: ``SealedIterableDataset`` (streamed, a window of chunks at a time),
``Session.ring`` with ``distributed_data_parallel`` (DDP's gradients over the encrypted
ring) and ``Session.configure_nccl`` (the job key for the NCCL plugin).
"""

from ._enclave import (  # noqa: F401  (the package's API)
    ATTESTED_MODE,
    CUDA,
    BatchIterator,
    DeviceTensor,
    Error,
    IntegrityError,
    LockedTensor,
    Ring,
    SealedTensorDataset,
    Session,
    SessionEnded,
)
from .ddp import broadcast_parameters, distributed_data_parallel, ring_allreduce_hook  # noqa: F401

__all__ = [
    "ATTESTED_MODE",
    "BatchIterator",
    "CUDA",
    "DeviceTensor",
    "Error",
    "IntegrityError",
    "LockedTensor",
    "SealedIterableDataset",
    "SealedTensorDataset",
    "Ring",
    "Session",
    "SessionEnded",
    "broadcast_parameters",
    "distributed_data_parallel",
    "ring_allreduce_hook",
    "torch_batches",
]


def torch_batches(dataset, batch_size, shuffle=False, seed=0, rank=0, world_size=1, drop_last=False, rows=None):
    """This rank's batches of one epoch as (x, y) torch tensors over locked memory.

    ``x`` is float32 [n, features], ``y`` int64 [n] (class indices); ``rows`` limits the
    epoch to those rows (a split's training rows). A dataset made with ``device="cuda"``
    gives CUDA tensors over the package's device memory. torch is imported here only: the
    package itself needs no torch.
    """
    import torch

    for x, y in dataset.batches(batch_size, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                                drop_last=drop_last, rows=rows):
        yield torch.from_dlpack(x), torch.from_dlpack(y)


def __getattr__(name):
    # SealedIterableDataset subclasses torch's IterableDataset: made (and torch imported)
    # on first use, so that `import enclave` needs no torch.
    if name == "SealedIterableDataset":
        from . import streaming

        try:
            from torch.utils.data import IterableDataset as base
        except ImportError:
            base = object
        cls = streaming.make_class(base)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'enclave' has no attribute {name!r}")
