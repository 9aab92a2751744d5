#!/usr/bin/python3
"""An independent connector for the encrypted NCCL transport, written from
docs/formats/net-transport.md only (handle, ClientHello/ServerHello/ClientFinished, HKDF
key schedule, record format, chunk plan). net_interop_test runs it against the plugin's
listener: the plugin must accept its handshake and deliver its records byte for byte,
and this script checks the plugin's ServerFinished MAC itself.

stdin, one item per line: job key (hex), listen handle (hex), "nsocks seed comm_id",
then the message sizes separated by spaces. Prints "PY OK <n>" or "PY FAIL <why>".
Needs python3-cryptography (scripts/install-deps); without it, it says so and exits 77,
and the test fails with that line."""

import hashlib
import hmac
import os
import socket
import struct
import sys

try:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError:
    print("PY SKIP cryptography missing", flush=True)
    sys.exit(77)

M64 = (1 << 64) - 1


def hkdf(key, salt, info):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(key)


def fill(n, seed, i):
    # tests/net/plugin_driver.h Fill(): xorshift64, 8 little-endian bytes per step.
    x = ((seed * 0x9E3779B97F4A7C15) ^ ((i + 1) * 0xBF58476D1CE4E5B9)) & M64
    out = bytearray()
    while len(out) < n:
        x ^= (x << 13) & M64
        x ^= x >> 7
        x ^= (x << 17) & M64
        out += struct.pack("<Q", x)
    return bytes(out[:n])


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError("listener closed the socket during the handshake")
        b += chunk
    return b


def plan(size, nsocks):
    if size == 0:
        return 0, 1
    c = -(-size // nsocks)
    c = -(-c // 4096) * 4096
    c = min(max(c, 32768), 262144)
    return c, -(-size // c)


def main():
    lines = sys.stdin.read().split("\n")
    key = bytes.fromhex(lines[0])
    handle = bytes.fromhex(lines[1])
    nsocks, seed, comm_id = (int(v) for v in lines[2].split())
    sizes = [int(v) for v in lines[3].split()]

    magic, version, family, port = struct.unpack_from("<4sBBH", handle, 0)
    assert magic == b"ENCH" and version == 1 and family == 4, "not a v1 IPv4 handle"
    addr = socket.inet_ntoa(handle[8:12])
    listen_id = handle[24:40]

    client_random = os.urandom(32)
    endpoint_id = os.urandom(16)
    socks, keys = [], []
    for i in range(nsocks):
        s = socket.create_connection((addr, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ch = (b"ENCN" + bytes([1, 1]) + struct.pack("<H", 88) + listen_id + client_random + endpoint_id +
              struct.pack("<QHHHH", comm_id, i, nsocks, 1, 0))
        s.sendall(ch)
        sh = recv_exact(s, 120)
        if sh[:8] != b"ENCN" + bytes([1, 2]) + struct.pack("<H", 120):
            raise ValueError("bad ServerHello preamble")
        if sh[8:24] != listen_id or struct.unpack_from("<QHHHH", sh, 72) != (comm_id, i, nsocks, 1, 0):
            raise ValueError("ServerHello does not echo listen id / comm id / socket index / count")
        t = hashlib.sha256(ch + sh[:88]).digest()
        k_sf = hkdf(key, t, b"enclave-net v1 server finished")
        k_cf = hkdf(key, t, b"enclave-net v1 client finished")
        k_d = hkdf(key, t, b"enclave-net v1 data c2s")
        if not hmac.compare_digest(hmac.new(k_sf, t, hashlib.sha256).digest(), sh[88:]):
            raise ValueError(f"socket {i}: ServerFinished MAC mismatch")
        s.sendall(b"ENCN" + bytes([1, 3]) + struct.pack("<H", 40) + hmac.new(k_cf, t, hashlib.sha256).digest())
        socks.append(s)
        keys.append(AESGCM(k_d))

    seqs = [0] * nsocks
    for m, size in enumerate(sizes):
        data = fill(size, seed, m)
        c, count = plan(size, nsocks)
        for k in range(count):
            j = k % nsocks
            chunk = data[k * c:min(size, (k + 1) * c)]
            header = struct.pack("<BBHIQQQ", 1, 0, 0, len(chunk), seqs[j], m, size)
            nonce = struct.pack("<Q", seqs[j]) + bytes(4)
            socks[j].sendall(header + keys[j].encrypt(nonce, chunk, header))
            seqs[j] += 1
    print(f"PY OK {len(sizes)}", flush=True)
    # Half-close, then wait until the listener closes (the test has read everything).
    for s in socks:
        s.shutdown(socket.SHUT_WR)
        try:
            s.recv(1)
        except OSError:
            pass


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - one line for the test log
        print(f"PY FAIL {e}", flush=True)
        sys.exit(1)
