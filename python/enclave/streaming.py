"""SealedIterableDataset: sealed records streamed chunk by chunk (docs/pytorch.md)."""

from . import _enclave


def make_class(base):
    """SealedIterableDataset over ``base`` (torch's IterableDataset, or object without torch)."""

    class SealedIterableDataset(_Stream, base):
        __doc__ = _Stream.__doc__

    SealedIterableDataset.__module__ = "enclave"
    return SealedIterableDataset


class _Stream:
    """This rank's batches of the job's sealed datasets, read a window of chunks at a time.

    Iterating yields ``(x, y)`` torch tensors (float32 [n, features], int64 [n]) over
    locked memory, one epoch per ``iter()``. At most ``window_chunks`` chunks of records
    are decrypted at once; each chunk is authenticated as a whole, and its records checked,
    before any of its rows is yielded (a tampered chunk raises ``IntegrityError`` and its
    batch is not yielded). With ``shuffle`` the chunks are permuted and the rows are
    shuffled within each window, seeded by ``seed + epoch`` (``set_epoch``). Every rank
    gets ``rows // world_size`` rows per epoch and no row goes to two ranks.

    ``enclave.SealedIterableDataset`` is made on first use: a subclass of
    ``torch.utils.data.IterableDataset`` when torch is installed (importing torch then, not
    at ``import enclave``), so ``DataLoader(ds, batch_size=None, num_workers=0)`` passes its
    batches through. It makes its own batches, and cannot move to worker processes (the
    keys stay in this process).
    """

    def __init__(self, session, batch_size, window_chunks=8, shuffle=False, seed=0, rank=0, world_size=1,
                 drop_last=False, dataset=None):
        self._stream = _enclave.SealedStream(session, dataset)
        self._args = dict(batch_size=batch_size, window_chunks=window_chunks, shuffle=shuffle, rank=rank,
                          world_size=world_size, drop_last=drop_last)
        self.seed = seed
        self.epoch = 0
        self._batches = len(self.batches())  # checks the arguments now

    def set_epoch(self, epoch):
        """The next iteration's epoch: its order is seeded by ``seed + epoch``."""
        self.epoch = epoch

    def batches(self):
        """One epoch of ``(x, y)`` as ``LockedTensor``s (DLPack, no torch needed)."""
        return self._stream.epoch(seed=self.seed + self.epoch, **self._args)

    def __iter__(self):
        import torch

        for x, y in self.batches():
            yield torch.from_dlpack(x), torch.from_dlpack(y)

    def __len__(self):
        """Batches per epoch on this rank."""
        return self._batches

    rows = property(lambda self: len(self._stream), doc="records in the stream (all ranks)")
    features = property(lambda self: self._stream.features)
    classes = property(lambda self: self._stream.classes)
    feature_names = property(lambda self: self._stream.feature_names)
    chunks = property(lambda self: self._stream.chunks)
    window_rows = property(lambda self: min(self._args["window_chunks"] * self._stream.max_chunk_rows, self.rows),
                           doc="the most records resident at once (one window)")

