#!/usr/bin/python3
"""An independent connector for the encrypted NCCL transport, written from
docs/formats/net-transport.md only (handle, ClientHello/ServerHello/ClientFinished, HKDF
key schedule, record format, chunk plan). net_interop_test runs it against the plugin's
listener: the plugin must accept its handshake and deliver its records byte for byte,
and this script checks the plugin's ServerFinished MAC itself.

stdin, one item per line: job key (hex), listen handle (hex), "nsocks seed comm_id [mode]",
then the message sizes separated by spaces. Prints "PY OK <n>" or "PY FAIL <why>".
Needs python3-cryptography (scripts/install-deps); without it, it says so and exits 77,
and the test fails with that line.

Modes (docs/formats/net-transport.md, "Handshake": a failed handshake closes that socket
only, and the listener goes on waiting for its peer):
  keyless  what anyone who read the handle can do without the job key, one socket after
           the other: a ClientHello with nsocks 0, one with another comm_id, one whose
           ClientFinished MAC is made without the key, and one that closes after the
           ServerHello. The listener must close each of the first three; prints
           "PY KEYLESS DROPPED 3" and sends no records.
  collide  the key's holder, one connection of nsocks 2 whose sockets arrive as: socket 0
           without the key (a forged ClientFinished), socket 0, socket 0 again, socket 1
           claiming nsocks 3, socket 1. The listener must close the forged, the repeated
           and the disagreeing socket and accept the others as the connection; the
           records then go over those two ("PY OK <n>").
  half     the key's holder, a connection of nsocks 2 of which only socket 0 comes: the
           listener must close it when its group timeout passes ("PY HALF CLOSED")."""

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


def client_hello(listen_id, client_random, endpoint_id, comm_id, i, nsocks):
    return (b"ENCN" + bytes([1, 1]) + struct.pack("<H", 88) + listen_id + client_random + endpoint_id +
            struct.pack("<QHHHH", comm_id, i, nsocks, 1, 0))


def handshake(addr, port, key, listen_id, ch, keyless=False):
    """One socket's handshake. Returns (socket, AESGCM of its data key); keyless: the
    ClientFinished MAC is made under a key of our own (all a party without the job key can
    do) and the data key is None."""
    s = socket.create_connection((addr, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(ch)
    sh = recv_exact(s, 120)
    if sh[:8] != b"ENCN" + bytes([1, 2]) + struct.pack("<H", 120):
        raise ValueError("bad ServerHello preamble")
    if sh[8:24] != listen_id or sh[72:88] != ch[72:88]:
        raise ValueError("ServerHello does not echo listen id / comm id / socket index / count")
    t = hashlib.sha256(ch + sh[:88]).digest()
    if keyless:
        mac = hmac.new(os.urandom(32), t, hashlib.sha256).digest()
        s.sendall(b"ENCN" + bytes([1, 3]) + struct.pack("<H", 40) + mac)
        return s, None
    k_sf = hkdf(key, t, b"enclave-net v1 server finished")
    k_cf = hkdf(key, t, b"enclave-net v1 client finished")
    k_d = hkdf(key, t, b"enclave-net v1 data c2s")
    if not hmac.compare_digest(hmac.new(k_sf, t, hashlib.sha256).digest(), sh[88:]):
        raise ValueError("socket %d: ServerFinished MAC mismatch" % struct.unpack_from("<H", ch, 80))
    s.sendall(b"ENCN" + bytes([1, 3]) + struct.pack("<H", 40) + hmac.new(k_cf, t, hashlib.sha256).digest())
    return s, AESGCM(k_d)


def closed_by_listener(s, what):
    """The listener closes s (EOF or reset) within 20 s; it sends nothing else."""
    s.settimeout(20)
    try:
        got = s.recv(1)
    except ConnectionResetError:
        got = b""
    except socket.timeout:
        raise ValueError(what + ": the listener did not close it within 20 s") from None
    if got:
        raise ValueError(what + ": the listener sent more bytes instead of closing it")
    s.close()


def keyless(addr, port, listen_id, nsocks, comm_id):
    cr, ep = os.urandom(32), os.urandom(16)
    # A ClientHello that names the listen id but does not parse: no ServerHello, closed.
    s = socket.create_connection((addr, port))
    s.sendall(client_hello(listen_id, cr, ep, comm_id, 0, 0))
    closed_by_listener(s, "ClientHello with nsocks 0")
    s = socket.create_connection((addr, port))
    s.sendall(client_hello(listen_id, cr, ep, (comm_id + 1) & M64, 0, nsocks))
    closed_by_listener(s, "ClientHello with another comm_id")
    s, _ = handshake(addr, port, None, listen_id, client_hello(listen_id, cr, ep, comm_id, 0, nsocks), True)
    closed_by_listener(s, "ClientFinished made without the key")
    # What a connector with another key does after its ServerFinished check failed.
    s = socket.create_connection((addr, port))
    s.sendall(client_hello(listen_id, cr, ep, comm_id, 0, nsocks))
    recv_exact(s, 120)
    s.close()
    print("PY KEYLESS DROPPED 3", flush=True)


def main():
    lines = sys.stdin.read().split("\n")
    key = bytes.fromhex(lines[0])
    handle = bytes.fromhex(lines[1])
    fields = lines[2].split()
    nsocks, seed, comm_id = (int(v) for v in fields[:3])
    mode = fields[3] if len(fields) > 3 else ""
    sizes = [int(v) for v in lines[3].split()] if len(lines) > 3 else []

    magic, version, family, port = struct.unpack_from("<4sBBH", handle, 0)
    assert magic == b"ENCH" and version == 1 and family == 4, "not a v1 IPv4 handle"
    addr = socket.inet_ntoa(handle[8:12])
    listen_id = handle[24:40]
    if mode == "keyless":
        return keyless(addr, port, listen_id, nsocks, comm_id)

    client_random = os.urandom(32)
    endpoint_id = os.urandom(16)
    hello = lambda i, n: client_hello(listen_id, client_random, endpoint_id, comm_id, i, n)  # noqa: E731
    socks, keys = [], []
    if mode == "collide":
        if nsocks != 2:
            raise ValueError("collide needs nsocks 2")
        s, _ = handshake(addr, port, key, listen_id, hello(0, 2), keyless=True)
        closed_by_listener(s, "socket 0 without the key")
        for i, n, dropped in ((0, 2, False), (0, 2, True), (1, 3, True), (1, 2, False)):
            s, k = handshake(addr, port, key, listen_id, hello(i, n))
            if dropped:
                closed_by_listener(s, "socket %d (nsocks %d) after socket %d was there" % (i, n, i))
            else:
                socks.append(s)
                keys.append(k)
    elif mode == "half":
        s, _ = handshake(addr, port, key, listen_id, hello(0, 2))
        s.settimeout(60)
        try:
            got = s.recv(1)
        except ConnectionResetError:
            got = b""
        if got:
            raise ValueError("the listener sent bytes on an incomplete connection")
        print("PY HALF CLOSED", flush=True)
        return
    elif mode:
        raise ValueError("unknown mode " + mode)
    else:
        for i in range(nsocks):
            s, k = handshake(addr, port, key, listen_id, hello(i, nsocks))
            socks.append(s)
            keys.append(k)

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
