"""The enclave Python package on the CPU (Debian's python3-torch), development mode.

Real components: enclave-data seals the breast-cancer sample into a real keystore,
enclave-train trains the reference MLP on the same sealed file, and the package decrypts
it through its C++ core. Run by CTest:
    /usr/bin/python3 -m unittest test_enclave   (ENCLAVE_BIN, ENCLAVE_SAMPLES, PYTHONPATH set)
"""

import json
import os
import shutil
import tempfile
import unittest

import enclave
from passphrase_pipe import passphrase_fd, with_passphrase  # noqa: F401 (the other tests import them from here)

BIN = os.environ["ENCLAVE_BIN"]          # the folder holding enclave-data and enclave-train
SAMPLES = os.environ["ENCLAVE_SAMPLES"]  # data/samples

JOB = """name = "torch-breast-cancer"
seed = 7
device = "cpu"
output_dir = "{out}"
export_key = "{pub}"

[[datasets]]
id = "breast-cancer"
path = "{sealed}"

[model]
hidden = [64]
activation = "relu"

[training]
epochs = 60
batch_size = 32
validation_fraction = 0.2
metrics = ["loss", "accuracy", "roc_auc"]

[optimizer]
type = "adamw"
lr = 0.01
l2 = 0.01

[schedule]
type = "cosine"
"""


class EnclavePackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="enclave-py-")
        d = cls.dir
        cls.keystore = f"{d}/tenant.keystore"
        cls.sealed = f"{d}/bc.sealed"
        data = f"{BIN}/enclave-data"
        with_passphrase([data, "keystore", "init", "--keystore", cls.keystore, "--passphrase-fd", "FD",
                         "--kdf-opslimit", "2", "--kdf-memlimit-mib", "19"])
        with_passphrase([data, "seal", "--csv", f"{SAMPLES}/breast_cancer_wisconsin.csv", "--label", "diagnosis",
                         "--positive", "malignant", "--suite", "aes-256-gcm", "--dataset-id", "breast-cancer",
                         "--keystore", cls.keystore, "--out", cls.sealed, "--passphrase-fd", "FD"])
        with_passphrase([data, "keystore", "export-key", "create", "--keystore", cls.keystore, "--passphrase-fd", "FD"])
        cls.pub = f"{d}/tenant-export.pub"
        with_passphrase([data, "keystore", "export-key", "show", "--keystore", cls.keystore, "--passphrase-fd", "FD",
                         "--out", cls.pub])
        cls.job = f"{d}/job.toml"
        with open(cls.job, "w") as f:
            f.write(JOB.format(out=f"{d}/out", pub=cls.pub, sealed=cls.sealed))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def session(self, job=None):
        fd = passphrase_fd()
        try:
            return enclave.Session.development(job or self.job, self.keystore, fd)
        finally:
            os.close(fd)

    def test_records_decrypt_into_tensors_equal_to_the_clear_csv(self):
        import csv

        import torch

        s = self.session()
        self.assertEqual(s.mode, "development")
        ds = enclave.SealedTensorDataset(s)
        self.assertEqual((len(ds), ds.features, ds.classes), (569, 30, 2))
        x, y = ds.gather([0, 1, 568])
        self.assertEqual((x.shape, x.dtype, y.shape, y.dtype), ([3, 30], "float32", [3], "int64"))
        tx, ty = torch.from_dlpack(x), torch.from_dlpack(y)
        with open(f"{SAMPLES}/breast_cancer_wisconsin.csv") as f:
            rows = list(csv.DictReader(f))
        for i, r in zip([0, 1, 568], range(3)):
            want = [float(rows[i][name]) for name in ds.feature_names]
            self.assertTrue(torch.allclose(tx[r], torch.tensor(want, dtype=torch.float32), rtol=1e-6),
                            f"row {i}: {tx[r]} vs {want}")
            self.assertEqual(int(ty[r]), 1 if rows[i]["diagnosis"] == "malignant" else 0)

    def test_batches_shard_every_row_once_per_epoch_and_shuffle_by_seed(self):
        import torch

        ds = enclave.SealedTensorDataset(self.session())
        everything = torch.cat([torch.from_dlpack(x) for x, _ in ds.batches(64)])
        self.assertEqual(everything.shape, (569, 30))
        # Two ranks: disjoint halves of one shuffled order, as many rows each (569 -> 2 x 284).
        seen = []
        for rank in (0, 1):
            it = ds.batches(50, shuffle=True, seed=3, rank=rank, world_size=2)
            self.assertEqual(len(it), 6)
            part = torch.cat([torch.from_dlpack(x) for x, _ in it])
            self.assertEqual(part.shape[0], 284)
            seen.append(part)
        both = torch.cat(seen)
        self.assertEqual(torch.unique(both, dim=0).shape[0], 568, "a row was given to both ranks or twice")
        first = [torch.from_dlpack(x) for x, _ in ds.batches(50, shuffle=True, seed=3, rank=0, world_size=2)]
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(first, torch.split(seen[0], 50))), "seeded order")
        other = torch.cat([torch.from_dlpack(x) for x, _ in ds.batches(50, shuffle=True, seed=4, rank=0,
                                                                          world_size=2)])
        self.assertFalse(torch.equal(other, seen[0]), "another seed, the same order")
        self.assertEqual(sum(1 for _ in ds.batches(100, drop_last=True)), 5)

    def test_a_tampered_chunk_raises_and_gives_no_data(self):
        bad = f"{self.dir}/tampered.sealed"
        with open(self.sealed, "rb") as f:
            blob = bytearray(f.read())
        blob[len(blob) - 100] ^= 1  # inside the last chunk's ciphertext
        with open(bad, "wb") as f:
            f.write(blob)
        job = f"{self.dir}/tampered.toml"
        with open(job, "w") as f:
            f.write(JOB.format(out=f"{self.dir}/out-t", pub=self.pub, sealed=bad))
        with self.assertRaises(enclave.IntegrityError) as e:
            enclave.SealedTensorDataset(self.session(job))
        self.assertIn(bad, str(e.exception))

    def test_a_gpu_dataset_without_a_gpu_is_refused_naming_the_device(self):
        # CI has no GPU: device="cuda" must fail with a clear error, not fall back to the CPU.
        # (On a GPU host it succeeds, and tests/python/gpu_check.py checks it there.)
        import torch

        s = self.session()
        try:
            ds = enclave.SealedTensorDataset(s, device="cuda")
        except enclave.Error as e:
            self.assertIn("device='cuda'", str(e))
            self.assertIn("GPU", str(e))
        else:
            self.assertEqual(ds.device, "cuda:0")
            self.skipTest("a GPU is present: gpu_check.py covers device='cuda'")
        self.assertEqual(enclave.SealedTensorDataset(s).device, "cpu")
        x, _ = enclave.SealedTensorDataset(s).gather([0])
        self.assertEqual(x.__dlpack_device__(), (1, 0))  # kDLCPU
        self.assertFalse(torch.from_dlpack(x).is_cuda)
        with self.assertRaises(enclave.Error) as e:
            enclave.SealedTensorDataset(s, device="cuda:1")
        self.assertIn("use 'cpu' or 'cuda'", str(e.exception))

    def test_closing_the_session_wipes_every_tensor_and_refuses_further_use(self):
        import torch

        s = self.session()
        ds = enclave.SealedTensorDataset(s)
        it = ds.batches(16)
        x, y = next(it)
        tx = torch.from_dlpack(x)
        self.assertGreater(float(tx.abs().sum()), 0)
        s.close()
        self.assertEqual(float(tx.abs().sum()), 0.0, "a tensor kept its plaintext after the session ended")
        with self.assertRaises(enclave.SessionEnded):
            next(it)
        with self.assertRaises(enclave.SessionEnded):
            ds.gather([0])
        with self.assertRaises(enclave.SessionEnded):
            enclave.SealedTensorDataset(s)

    def test_a_torch_mlp_matches_enclave_train_on_the_same_split(self):
        import torch

        # The reference: enclave-train's MLP on the same sealed file, job and split.
        with_passphrase([f"{BIN}/enclave-train", "run", "--job", self.job, "--keystore", self.keystore,
                         "--passphrase-fd", "FD", "--device", "cpu", "--force"])
        with open(f"{self.dir}/out/report.json") as f:
            reference = json.load(f)["final"]["val_accuracy"]

        ds = enclave.SealedTensorDataset(self.session())
        train_rows, val_rows = ds.stratified_split(0.2, 7)
        self.assertEqual(len(train_rows) + len(val_rows), 569)
        xt, yt = (torch.from_dlpack(t) for t in ds.gather(train_rows))
        xv, yv = (torch.from_dlpack(t) for t in ds.gather(val_rows))
        mean, std = xt.mean(0), xt.std(0, unbiased=False).clamp_min(1e-12)
        accuracies = []
        for seed in range(3):
            torch.manual_seed(seed)
            model = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
            opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
            epochs, steps = 60, (len(train_rows) + 31) // 32
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps)
            for epoch in range(epochs):
                for x, y in enclave.torch_batches(ds, 32, shuffle=True, seed=1000 * seed + epoch, rows=train_rows):
                    loss = torch.nn.functional.cross_entropy(model((x - mean) / std), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sched.step()
            with torch.no_grad():
                accuracies.append(float((model((xv - mean) / std).argmax(1) == yv).float().mean()))
        mean_accuracy = sum(accuracies) / len(accuracies)
        print(f"\nenclave-train MLP val accuracy {reference:.4f}; torch MLP over the package "
              f"{mean_accuracy:.4f} (seeds {', '.join(f'{a:.4f}' for a in accuracies)})")
        self.assertLessEqual(abs(mean_accuracy - reference), 0.01 + 1e-9)

    def test_export_seals_to_the_tenant_key_and_enclave_data_opens_it(self):
        s = self.session()
        model = os.urandom(1000) + b"weights"
        out = f"{self.dir}/model.sealed"
        digest = s.export(model, out, format="test-bytes")
        self.assertEqual(len(digest), 64)
        with open(out, "rb") as f:
            import hashlib
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
        with self.assertRaises(enclave.Error):
            s.export(model, out)  # exists: not overwritten without overwrite=True
        with open(out, "rb") as f:
            self.assertNotIn(b"weights", f.read())
        opened = f"{self.dir}/model.bin"
        with_passphrase([f"{BIN}/enclave-data", "open-model", "--keystore", self.keystore, "--passphrase-fd", "FD",
                         "--in", out, "--out", opened])
        with open(opened, "rb") as f:
            self.assertEqual(f.read(), model)

    def test_no_plaintext_record_reaches_a_file(self):
        # Every file the tools and the package wrote here (keystore, sealed data, job,
        # enclave-train's outputs, exported models): none holds a record in clear, as text
        # or as the float32 bytes the package decrypts into.
        import torch

        ds = enclave.SealedTensorDataset(self.session())
        x, _ = ds.gather([0])
        row = torch.from_dlpack(x)[0].numpy().tobytes()
        self.assertEqual(len(row), 120)
        text = b"17.99,10.38,122.8"  # the first record of the sample, as the CSV has it
        with open(f"{SAMPLES}/breast_cancer_wisconsin.csv", "rb") as f:
            self.assertIn(text, f.read(), "the needle must be real")
        checked = 0
        for root, _, files in os.walk(self.dir):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    blob = f.read()
                self.assertNotIn(row, blob, name)
                self.assertNotIn(text, blob, name)
                checked += 1
        self.assertGreaterEqual(checked, 4)


if __name__ == "__main__":
    unittest.main()
