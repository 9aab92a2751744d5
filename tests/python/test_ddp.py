"""DistributedDataParallel over the encrypted ring: two CPU rank processes on loopback,
development mode (both hold the tenant keystore and derive the job communication key
from it, as enclave-train does), against one process training on the same global batches.

Every connection of the ring is real (net/ring.h over the plugin's TCP transport); one of
them goes through a recording TCP proxy in this test, the handle rewritten to point at it
(the handle is routing only: docs/formats/net-transport.md), so the test can check that the
gradients did not cross in clear. Run by CTest:
    /usr/bin/python3 -m unittest test_ddp   (ENCLAVE_BIN, ENCLAVE_SAMPLES, PYTHONPATH set)
"""

import glob
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import torch

import ddp_common as common
import enclave
from test_enclave import BIN, JOB, SAMPLES, passphrase_fd, with_passphrase

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingProxy:
    """Forwards one TCP connection to `target`, keeping every byte it carried."""

    def __init__(self, target):
        self.target, self.seen = target, bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        client, _ = self.listener.accept()
        self.listener.close()
        server = socket.create_connection(self.target)
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def pump(self, src, dst):
        try:
            while data := src.recv(1 << 16):
                self.seen += data
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            src.close()


class DdpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="enclave-ddp-")
        d = cls.dir
        data = f"{BIN}/enclave-data"
        cls.keystore, cls.other_keystore = f"{d}/tenant.keystore", f"{d}/other.keystore"
        for k in (cls.keystore, cls.other_keystore):
            with_passphrase([data, "keystore", "init", "--keystore", k, "--passphrase-fd", "FD",
                             "--kdf-opslimit", "2", "--kdf-memlimit-mib", "19"])
        sealed = f"{d}/bc.sealed"
        with_passphrase([data, "seal", "--csv", f"{SAMPLES}/breast_cancer_wisconsin.csv", "--label", "diagnosis",
                         "--positive", "malignant", "--suite", "aes-256-gcm", "--dataset-id", "breast-cancer",
                         "--keystore", cls.keystore, "--out", sealed, "--passphrase-fd", "FD"])
        cls.job = f"{d}/job.toml"
        with open(cls.job, "w") as f:
            f.write(JOB.format(out=f"{d}/out", pub="unused.pub", sealed=sealed))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def start_rank(self, rank, rendezvous, port, out, keystore=None, timeout_s=90):
        """A rank process; its ring waits timeout_s for the other (rank 1 starts later here)."""
        fd = passphrase_fd()
        try:
            return subprocess.Popen([sys.executable, f"{HERE}/ddp_rank.py", self.job, keystore or self.keystore,
                                     str(fd), str(rank), "2", rendezvous, str(port), out, str(timeout_s)],
                                    pass_fds=(fd,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=dict(os.environ, ENCLAVE_NET_IFNAME="lo"))  # the ring on loopback
        finally:
            os.close(fd)

    def finish(self, procs, outs):
        """Each rank's OUT, with its log (stdout and stderr) as "log"."""
        results = []
        for p, out in zip(procs, outs):
            log, _ = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, log)
            results.append(dict(torch.load(out), log=log))
        return results

    def test_two_ranks_train_as_one_process_and_gradients_cross_encrypted(self):
        rendezvous = tempfile.mkdtemp(dir=self.dir)
        outs = [f"{rendezvous}/rank{r}.pt" for r in (0, 1)]
        port = free_port()
        rank0 = self.start_rank(0, rendezvous, port, outs[0])
        # Rank 1 will reach rank 0 through the proxy: rank 0's published handle, rewritten.
        deadline = time.time() + 60
        while not (handles := glob.glob(f"{rendezvous}/*.rank-0.handle")) and time.time() < deadline:
            time.sleep(0.05)
        self.assertTrue(handles, "rank 0 published no handle")
        with open(handles[0]) as f:
            handle = bytearray(bytes.fromhex(f.read().strip()))
        self.assertEqual((handle[:4], handle[5]), (b"ENCH", 4))
        real_port, = struct.unpack_from("<H", handle, 6)
        proxy = RecordingProxy((socket.inet_ntoa(bytes(handle[8:12])), real_port))
        struct.pack_into("<H", handle, 6, proxy.port)
        handle[8:12] = socket.inet_aton("127.0.0.1")
        with open(handles[0] + ".tmp", "w") as f:
            f.write(handle.hex() + "\n")
        os.replace(handles[0] + ".tmp", handles[0])
        rank1 = self.start_rank(1, rendezvous, port, outs[1])
        r0, r1 = self.finish([rank0, rank1], outs)

        # The reference: one process, each global batch the two ranks' parts together.
        s = self.session()
        ds = enclave.SealedTensorDataset(s)
        scale = common.scaling(ds)
        net = common.model(seed=100)  # rank 0's initial parameters
        initial = common.flat(net).clone()
        opt = common.optimizer(net.parameters())
        for epoch in range(common.EPOCHS):
            for (x0, y0), (x1, y1) in zip(common.batches(ds, epoch, 0, 2), common.batches(ds, epoch, 1, 2)):
                common.step(net, opt, torch.cat([x0, x1]), torch.cat([y0, y1]), scale)
        want = common.flat(net)

        # Rank 1 started from rank 0's parameters (broadcast over the ring, not gloo).
        self.assertTrue(torch.equal(r1["broadcast"], initial))
        self.assertTrue(torch.equal(r0["final"], r1["final"]), "the ranks' parameters differ")
        err = float((r0["final"] - want).abs().max() / want.abs().max())
        print(f"\nDDP over the ring vs one process: max |diff| / max |param| = {err:.2e}; "
              f"bytes sent by rank 0: {r0['bytes_sent']}")
        self.assertLess(err, 1e-5)
        self.assertFalse(torch.equal(want, initial), "nothing trained")

        # What crossed the proxied connection: the ring's handshake, then records the size
        # of the gradients, in none of which a gradient (rank 1's own, or the sum) shows.
        seen = bytes(proxy.seen)
        self.assertIn(b"ENCN", seen, "the proxy did not carry the ring's connection")
        self.assertGreater(len(seen), r1["bytes_sent"] // 2)
        for name in ("local", "summed"):
            grad = r1["first"][name].numpy().tobytes()
            self.assertGreater(len(grad), 256)
            for at in range(0, len(grad) - 32, len(grad) // 8):
                self.assertNotIn(grad[at:at + 32], seen, f"rank 1's {name} gradient bytes {at}.. in clear on the wire")

    def test_a_rank_with_another_key_cannot_join(self):
        rendezvous = tempfile.mkdtemp(dir=self.dir)
        outs = [f"{rendezvous}/rank{r}.pt" for r in (0, 1)]
        port = free_port()
        procs = [self.start_rank(0, rendezvous, port, outs[0], timeout_s=20),
                 self.start_rank(1, rendezvous, port, outs[1], keystore=self.other_keystore, timeout_s=20)]
        results = self.finish(procs, outs)
        for rank, r in enumerate(results):
            self.assertIn("ring_error", r, f"rank {rank} joined a ring with a rank of another key")
            print(f"\nrank {rank}: {r['ring_error']}")
            self.assertIn("joining the encrypted ring", r["ring_error"])
            # The plugin's line on stderr says why: the peer's handshake MAC (job key).
            self.assertIn("did not prove the job key", r["log"])

    def test_a_ring_of_one_and_the_session_end(self):
        import numpy

        s = self.session()
        ring = s.ring(0, 1, rendezvous=tempfile.mkdtemp(dir=self.dir))
        self.assertEqual((ring.rank, ring.world_size), (0, 1))
        a = numpy.arange(5, dtype=numpy.float32)
        ring.all_reduce_sum(a)
        self.assertEqual(a.tolist(), [0, 1, 2, 3, 4])
        with self.assertRaises(enclave.Error):
            ring.all_reduce_sum(numpy.arange(5))  # int64
        with self.assertRaises(enclave.Error):
            ring.all_reduce_sum(numpy.zeros((4, 4), dtype=numpy.float32)[:, 1])  # strided
        with self.assertRaises(enclave.Error):
            s.ring(0, 2)  # development mode: no rendezvous, no broker
        s.close()
        with self.assertRaises(enclave.SessionEnded):
            ring.all_reduce_sum(a)
        with self.assertRaises(enclave.SessionEnded):
            s.ring(0, 1, rendezvous=self.dir)

    def session(self):
        fd = passphrase_fd()
        try:
            return enclave.Session.development(self.job, self.keystore, fd)
        finally:
            os.close(fd)


if __name__ == "__main__":
    unittest.main()
