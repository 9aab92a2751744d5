"""The test keystores' passphrase, handed to enclave-* commands and sessions on a pipe.

Shared by the CPU tests (test_enclave.py re-exports it) and gpu_check.py, which runs on a
GPU machine without CTest's environment.
"""

import os
import subprocess

PASSPHRASE = b"correct horse battery staple\n"


def passphrase_fd():
    """A pipe's read end holding the passphrase (the caller closes it)."""
    read, write = os.pipe()
    os.write(write, PASSPHRASE)
    os.close(write)
    return read


def with_passphrase(args):
    """Runs an enclave-* command with the passphrase on a pipe ("FD" in args names it)."""
    read = passphrase_fd()
    try:
        r = subprocess.run([str(read) if a == "FD" else a for a in args], pass_fds=(read,), capture_output=True,
                           text=True)
    finally:
        os.close(read)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r
