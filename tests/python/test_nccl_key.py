"""Session.configure_nccl on the CPU: the job key reaches the encrypted plugin that NCCL
would load in this process, through its exported C function.

No GPU and no NCCL here: the plugin is driven through its NCCL ABI (ncclNetPlugin_v11,
from ctypes, as NCCL's proxy drives it): init() refuses without a key, and after
configure_nccl two of its contexts connect to each other only when both hold this job's
key (the handshake proves it); a context keyed by another keystore's session is refused.
Whether torch's NCCL then uses the plugin is tested only on a GPU (docs/pytorch.md).
Run by CTest:
    /usr/bin/python3 -m unittest test_nccl_key   (ENCLAVE_BIN, ENCLAVE_SAMPLES, PYTHONPATH set)
"""

import ctypes
import os
import shutil
import tempfile
import time
import unittest

import enclave
from test_enclave import BIN, JOB, passphrase_fd, with_passphrase

c_int, c_void_p, c_uint64, P = ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER
FIELDS = ["name", "init", "devices", "getProperties", "listen", "connect", "accept"]


class PluginV11:
    """The functions of ncclNetPlugin_v11 this test calls (net/src/nccl_net_v11.h)."""

    def __init__(self, lib):
        table = (c_void_p * len(FIELDS)).in_dll(lib, "ncclNetPlugin_v11")
        fn = dict(zip(FIELDS, table))
        self.init = ctypes.CFUNCTYPE(c_int, P(c_void_p), c_uint64, c_void_p, c_void_p, c_void_p)(fn["init"])
        self.listen = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, c_void_p, P(c_void_p))(fn["listen"])
        self.connect = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, c_void_p, P(c_void_p), c_void_p)(fn["connect"])
        self.accept = ctypes.CFUNCTYPE(c_int, c_void_p, P(c_void_p), c_void_p)(fn["accept"])

    def context(self):
        ctx = c_void_p()
        rc = self.init(ctypes.byref(ctx), 42, None, None, None)
        return ctx if rc == 0 else rc

    def connects(self, listener_ctx, connector_ctx, seconds=20):
        """True when connector_ctx's connect() to a listen() of listener_ctx completes."""
        handle = ctypes.create_string_buffer(128)
        listen = c_void_p()
        assert self.listen(listener_ctx, 0, handle, ctypes.byref(listen)) == 0
        send, recv = c_void_p(), c_void_p()
        deadline = time.time() + seconds
        while time.time() < deadline:
            if not send:
                if self.connect(connector_ctx, 0, handle, ctypes.byref(send), None) != 0:
                    return False
            if not recv:
                assert self.accept(listen, ctypes.byref(recv), None) == 0
            if send and recv:
                return True
            time.sleep(0.01)
        raise AssertionError("neither connected nor refused in time")


class NcclKeyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="enclave-nccl-")
        cls.keystores = [f"{cls.dir}/tenant.keystore", f"{cls.dir}/other.keystore"]
        for k in cls.keystores:
            with_passphrase([f"{BIN}/enclave-data", "keystore", "init", "--keystore", k, "--passphrase-fd", "FD",
                             "--kdf-opslimit", "2", "--kdf-memlimit-mib", "19"])
        cls.job = f"{cls.dir}/job.toml"
        with open(cls.job, "w") as f:
            f.write(JOB.format(out=f"{cls.dir}/out", pub="unused.pub", sealed=f"{cls.dir}/unused.sealed"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def session(self, keystore):
        fd = passphrase_fd()
        try:
            return enclave.Session.development(self.job, keystore, fd)
        finally:
            os.close(fd)

    def test_the_job_key_reaches_the_plugin_nccl_loads_and_leaves_with_the_session(self):
        for var in ("NCCL_NET", "NCCL_NET_PLUGIN"):
            self.assertNotIn(var, os.environ)
        # What NCCL does for NCCL_NET_PLUGIN=enclave: dlopen("libnccl-net-enclave.so").
        plugin = PluginV11(ctypes.CDLL("libnccl-net-enclave.so", mode=ctypes.RTLD_GLOBAL))
        self.assertIsInstance(plugin.context(), int, "init() ran without a job key")

        s = self.session(self.keystores[0])
        path = s.configure_nccl()
        with open("/proc/self/maps") as f:
            loaded = {line.split()[-1] for line in f if "libnccl-net-enclave.so" in line}
        self.assertEqual(loaded, {os.path.realpath(path)}, "more than one plugin in the process")
        getenv = ctypes.CDLL(None).getenv
        getenv.restype = ctypes.c_char_p
        self.assertEqual((getenv(b"NCCL_NET"), getenv(b"NCCL_NET_PLUGIN")), (b"enclave", b"enclave"))
        ours = plugin.context()
        self.assertIsInstance(ours, c_void_p, "init() failed after configure_nccl")
        self.assertTrue(plugin.connects(ours, plugin.context()), "two contexts with the job key did not connect")

        # Another keystore derives another key for the same job: refused by the handshake.
        # (The plugin holds one key per process: the last configured.)
        other = self.session(self.keystores[1])
        other.configure_nccl()
        theirs = plugin.context()
        self.assertIsInstance(theirs, c_void_p)
        self.assertFalse(plugin.connects(ours, theirs), "a context with another key connected")

        # The session's end clears the plugin's key (later communicators fail closed), and
        # an ended session refuses.
        other.close()
        self.assertIsInstance(plugin.context(), int, "init() still had a key after the session ended")
        s.close()
        with self.assertRaises(enclave.SessionEnded):
            s.configure_nccl()


if __name__ == "__main__":
    unittest.main()
