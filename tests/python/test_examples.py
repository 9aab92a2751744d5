"""examples/pytorch/ run as its README says (development mode), shortened, so they cannot rot.

The README's job files are copied into a scratch tree laid out like the repository
(examples/..., out/...), the data sealed there by enclave-data as the README seals it,
and each script run with fewer epochs; its exported model is opened by enclave-data and
loaded by torch. Run by CTest:
    /usr/bin/python3 -m unittest test_examples   (ENCLAVE_BIN, ENCLAVE_SAMPLES, PYTHONPATH set)
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

from test_enclave import BIN, SAMPLES, passphrase_fd, with_passphrase

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


class ExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="enclave-examples-")
        os.makedirs(f"{cls.root}/examples/pytorch")
        os.makedirs(f"{cls.root}/out")
        shutil.copy(f"{EXAMPLES}/breast_cancer_sealed.toml", f"{cls.root}/examples/")
        shutil.copy(f"{EXAMPLES}/pytorch/synth.toml", f"{cls.root}/examples/pytorch/")
        cls.data(["keystore", "init", "--keystore", "out/tenant.keystore", "--kdf-opslimit", "2",
                  "--kdf-memlimit-mib", "19"])
        cls.data(["keystore", "export-key", "create", "--keystore", "out/tenant.keystore"])
        cls.data(["keystore", "export-key", "show", "--keystore", "out/tenant.keystore", "--out",
                  "out/tenant-export.pub"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root)

    @classmethod
    def data(cls, args, passphrase=True):
        cwd = os.getcwd()
        os.chdir(cls.root)
        try:
            if passphrase:
                return with_passphrase([f"{BIN}/enclave-data"] + args + ["--passphrase-fd", "FD"])
            return subprocess.run([f"{BIN}/enclave-data"] + args, check=True, capture_output=True)
        finally:
            os.chdir(cwd)

    def run_example(self, script, job, epochs, out):
        fd = passphrase_fd()
        try:
            r = subprocess.run([sys.executable, f"{EXAMPLES}/pytorch/{script}", "--job", job, "--keystore",
                                "out/tenant.keystore", "--passphrase-fd", str(fd), "--epochs", str(epochs)],
                               cwd=self.root, pass_fds=(fd,), capture_output=True, text=True, timeout=300)
        finally:
            os.close(fd)
        self.assertEqual(r.returncode, 0, r.stderr)
        print(f"\n{script}: {r.stdout.strip()}")
        self.data(["open-model", "--keystore", "out/tenant.keystore", "--in", out, "--out", out + ".pt"])
        return r.stdout, torch.load(f"{self.root}/{out}.pt")

    def test_tabular_mlp_on_the_sealed_sample(self):
        self.data(["seal", "--csv", f"{SAMPLES}/breast_cancer_wisconsin.csv", "--label", "diagnosis",
                   "--positive", "malignant", "--suite", "aes-256-gcm", "--dataset-id", "breast-cancer",
                   "--keystore", "out/tenant.keystore", "--out", "out/breast_cancer.sealed"])
        stdout, model = self.run_example("tabular_mlp.py", "examples/breast_cancer_sealed.toml", 5,
                                         "out/pytorch-breast-cancer-mlp.sealed")
        accuracy = float(re.search(r"validation accuracy ([0-9.]+)", stdout).group(1))
        self.assertGreater(accuracy, 0.9)
        self.assertEqual(model["state_dict"]["0.weight"].shape, (64, 30))

    def test_synth_conv_streams_the_synthetic_data(self):
        self.data(["synth", "--rows", "1200", "--features", "64", "--seed", "3", "--out", "out/synth.csv"],
                  passphrase=False)
        with open(f"{self.root}/out/synth.csv") as f:
            lines = f.readlines()
        for part, rows in (("train", lines[1:901]), ("test", lines[901:])):
            with open(f"{self.root}/out/synth-{part}.csv", "w") as f:
                f.writelines([lines[0]] + rows)
            self.data(["seal", "--csv", f"out/synth-{part}.csv", "--label", "y", "--suite", "chacha20-poly1305",
                       "--dataset-id", f"synth-{part}", "--chunk-records", "100", "--keystore",
                       "out/tenant.keystore", "--out", f"out/synth-{part}.sealed"])
        stdout, model = self.run_example("synth_conv.py", "examples/pytorch/synth.toml", 3,
                                         "out/pytorch-synth-conv.sealed")
        accuracy = float(re.search(r"test accuracy ([0-9.]+)", stdout).group(1))
        self.assertGreater(accuracy, 0.65)
        self.assertIn("900 training rows streamed 400 at a time", stdout)
        self.assertEqual(model["conv.0.weight"].shape, (8, 1, 5))


if __name__ == "__main__":
    unittest.main()
