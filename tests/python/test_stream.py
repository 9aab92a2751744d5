"""enclave.SealedIterableDataset on the CPU, development mode (docs/pytorch.md, "Streaming").

The breast-cancer sample sealed by enclave-data in chunks of 50 records (12 chunks, the
last of 19), streamed through the package's C++ core and compared with
SealedTensorDataset's records. Run by CTest:
    /usr/bin/python3 -m unittest test_stream   (ENCLAVE_BIN, ENCLAVE_SAMPLES, PYTHONPATH set)
"""

import gc
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import torch

import enclave
from test_enclave import BIN, JOB, SAMPLES, passphrase_fd, with_passphrase

CHUNK = 50  # records per chunk


def rows_of(batches):
    """The (features, label) rows of a stream's batches, as hashable tuples, in order."""
    out = []
    for x, y in batches:
        out += [(tuple(r), int(c)) for r, c in zip(x.tolist(), y.tolist())]
    return out


class StreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="enclave-stream-")
        d = cls.dir
        cls.keystore = f"{d}/tenant.keystore"
        cls.sealed = f"{d}/bc.sealed"
        data = f"{BIN}/enclave-data"
        with_passphrase([data, "keystore", "init", "--keystore", cls.keystore, "--passphrase-fd", "FD",
                         "--kdf-opslimit", "2", "--kdf-memlimit-mib", "19"])
        with_passphrase([data, "seal", "--csv", f"{SAMPLES}/breast_cancer_wisconsin.csv", "--label", "diagnosis",
                         "--positive", "malignant", "--suite", "chacha20-poly1305", "--dataset-id", "breast-cancer", "--chunk-records", str(CHUNK),
                         "--keystore", cls.keystore, "--out", cls.sealed, "--passphrase-fd", "FD"])
        cls.job = cls.write_job("job", cls.sealed)
        ds = enclave.SealedTensorDataset(cls.session_for(cls.job))
        cls.n = len(ds)
        cls.all_rows = rows_of([tuple(map(torch.from_dlpack, ds.gather(list(range(cls.n)))))])
        cls.index = {r: i for i, r in enumerate(cls.all_rows)}
        assert len(cls.index) == cls.n, "the sample's rows must be distinct for these tests"

    @classmethod
    def write_job(cls, name, sealed):
        path = f"{cls.dir}/{name}.toml"
        with open(path, "w") as f:
            f.write(JOB.format(out=f"{cls.dir}/out-{name}", pub="unused.pub", sealed=sealed))
        return path

    @classmethod
    def session_for(cls, job):
        fd = passphrase_fd()
        try:
            return enclave.Session.development(job, cls.keystore, fd)
        finally:
            os.close(fd)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def stream(self, job=None, **kw):
        return enclave.SealedIterableDataset(self.session_for(job or self.job), **kw)

    def test_an_epoch_is_every_record_once_shuffled_within_windows(self):
        ds = self.stream(batch_size=32, window_chunks=3, shuffle=True, seed=5)
        self.assertEqual((ds.rows, ds.features, ds.classes, ds.chunks), (569, 30, 2, 12))
        self.assertEqual(len(ds), 18)
        epoch = rows_of(ds)
        self.assertEqual(sorted(epoch), sorted(self.all_rows), "not SealedTensorDataset's records as a multiset")
        order = [self.index[r] for r in epoch]
        self.assertNotEqual(order, sorted(order), "shuffle=True left the order as sealed")
        # Windows of three chunks: the order cuts into runs that are each three whole
        # chunks (the last run: what is left), and the rows within a run are mixed.
        size = lambda c: min(CHUNK, self.n - c * CHUNK)  # noqa: E731
        runs, start = [], 0
        while start < len(order):
            chunks, end = set(), start
            while end < len(order):
                chunks.add(order[end] // CHUNK)
                end += 1
                self.assertLessEqual(len(chunks), 3, f"a window from position {start} spans more than 3 chunks")
                if len(chunks) == 3 and end - start == sum(map(size, chunks)):
                    break
            runs.append(order[start:end])
            start = end
        self.assertEqual(len(runs), 4)
        self.assertTrue(all(r != sorted(r) for r in runs), "rows not shuffled within a window")
        # The seed and the epoch fix the order; another epoch, another order.
        self.assertEqual([self.index[r] for r in rows_of(ds)], order)
        ds.set_epoch(1)
        self.assertNotEqual([self.index[r] for r in rows_of(ds)], order)
        # Unshuffled: as sealed.
        self.assertEqual(rows_of(self.stream(batch_size=100)), self.all_rows)

    def test_ranks_get_disjoint_equal_shares_that_cover_the_epoch(self):
        for world in (2, 3):
            shares = []
            for rank in range(world):
                ds = self.stream(batch_size=40, window_chunks=2, shuffle=True, seed=9, rank=rank, world_size=world)
                shares.append([self.index[r] for r in rows_of(ds)])
                self.assertEqual(len(shares[-1]), self.n // world, f"rank {rank} of {world}")
            union = set().union(*map(set, shares))
            self.assertEqual(len(union), world * (self.n // world), f"a row went to two ranks ({world} ranks)")
        ds = self.stream(batch_size=40, drop_last=True, rank=1, world_size=2)
        self.assertEqual(len(ds), 7)
        self.assertTrue(all(len(y) == 40 for _, y in ds))

    def test_a_tampered_middle_chunk_raises_before_any_of_its_rows(self):
        bad = f"{self.dir}/tampered.sealed"
        with open(self.sealed, "rb") as f:
            blob = bytearray(f.read())
        header_length, = struct.unpack_from("<I", blob, 16)
        chunk_size, = struct.unpack_from("<I", blob, 84)
        self.assertEqual(chunk_size, CHUNK * 31 * 4)
        blob[header_length + 5 * (chunk_size + 16) + 7] ^= 1  # chunk 5's ciphertext: rows 250..299
        with open(bad, "wb") as f:
            f.write(blob)
        job = self.write_job("tampered", bad)
        # Opening checks the header only: the stream starts, and yields chunks 0-4's rows.
        ds = self.stream(job, batch_size=40, window_chunks=1)
        seen = []
        it = ds.batches()
        with self.assertRaises(enclave.IntegrityError) as e:
            for x, y in it:
                seen += rows_of([(torch.from_dlpack(x), torch.from_dlpack(y))])
        self.assertIn("chunk 5", str(e.exception))
        self.assertIn(bad, str(e.exception))
        self.assertEqual(len(seen), 240, "the batch that needed chunk 5 was yielded in part")
        self.assertEqual(seen, self.all_rows[:240])
        with self.assertRaises(enclave.Error):
            next(it)  # the epoch stays failed
        # Shuffled: whatever comes first, no row of chunk 5 is ever yielded.
        ds = self.stream(job, batch_size=16, window_chunks=3, shuffle=True, seed=2)
        seen = []
        with self.assertRaises(enclave.IntegrityError):
            for x, y in ds:
                seen += rows_of([(x, y)])
        self.assertFalse(any(250 <= self.index[r] < 300 for r in seen))

    def test_memory_is_one_window_of_chunks(self):
        def locked_kib():
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))

        # Locked memory (VmLck) while streaming: the readers, one window, the batch alive.
        # It grows with the window, and a window of 2 of the 12 chunks stays below the
        # table's 69 KiB (page granularity: each locked buffer takes whole pages).
        def peak_kib(window_chunks):
            gc.collect()  # the other tests' buffers freed before, not during, the measurement
            s = self.session_for(self.job)
            before = locked_kib()
            ds = enclave.SealedIterableDataset(s, batch_size=10, window_chunks=window_chunks)
            it = ds.batches()
            self.assertEqual(it.window_rows, min(window_chunks * CHUNK, self.n))
            peak = 0
            for x, y in it:
                torch.from_dlpack(x)
                peak = max(peak, locked_kib() - before)
            s.close()
            return peak

        table_kib = self.n * 31 * 4 // 1024
        small, whole = peak_kib(2), peak_kib(12)
        self.assertLess(small, table_kib, f"VmLck grew {small} KiB streaming windows of 2 chunks")
        self.assertGreater(whole - small, 40, f"windows of 2 chunks: {small} KiB, of 12: {whole} KiB")

    def test_closing_the_session_wipes_and_ends_the_stream(self):
        s = self.session_for(self.job)
        ds = enclave.SealedIterableDataset(s, batch_size=16, window_chunks=2)
        it = iter(ds)
        x, y = next(it)
        self.assertGreater(float(x.abs().sum()), 0)
        s.close()
        self.assertEqual(float(x.abs().sum()), 0.0, "a streamed batch kept its plaintext after the session ended")
        with self.assertRaises(enclave.SessionEnded):
            next(it)
        with self.assertRaises(enclave.SessionEnded):
            next(iter(ds))

    def test_the_jobs_datasets_stream_as_one_in_job_order(self):
        second = f"{self.dir}/bc2.sealed"
        with_passphrase([f"{BIN}/enclave-data", "seal", "--csv", f"{SAMPLES}/breast_cancer_wisconsin.csv", "--label",
                         "diagnosis", "--positive", "malignant", "--suite", "aes-256-gcm", "--dataset-id", "second",
                         "--chunk-records", "200", "--keystore", self.keystore, "--out", second, "--passphrase-fd",
                         "FD"])
        job = f"{self.dir}/two.toml"
        with open(job, "w") as f:
            f.write(JOB.format(out=f"{self.dir}/out-two", pub="unused.pub", sealed=self.sealed) +
                    f'\n[[datasets]]\nid = "second"\npath = "{second}"\n')
        ds = self.stream(job, batch_size=100)
        self.assertEqual((ds.rows, ds.chunks), (2 * self.n, 12 + 3))
        self.assertEqual(rows_of(ds), self.all_rows + self.all_rows)
        self.assertEqual(self.stream(job, batch_size=100, dataset="second").rows, self.n)
        # A file whose sealed id is not the one the job names is refused before any chunk.
        with open(job, "w") as f:
            f.write(JOB.format(out=f"{self.dir}/out-two", pub="unused.pub", sealed=second))
        with self.assertRaises(enclave.Error) as e:
            self.stream(job, batch_size=100)
        self.assertIn("sealed dataset id is 'second'", str(e.exception))

    def test_a_torch_dataloader_passes_its_batches_through(self):
        ds = self.stream(batch_size=64, window_chunks=4, shuffle=True, seed=3)
        self.assertIsInstance(ds, torch.utils.data.IterableDataset)
        loader = torch.utils.data.DataLoader(ds, batch_size=None)
        self.assertEqual(len(loader), len(ds))
        got = [(x.clone(), y.clone()) for x, y in loader]
        want = list(ds)
        self.assertTrue(all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, want)))
        # The package itself imports no torch.
        r = subprocess.run([sys.executable, "-c", "import sys, enclave; assert 'torch' not in sys.modules"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
