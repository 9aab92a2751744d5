#!/usr/bin/env python3
"""Seeds for fuzz_audit_witness (tests/fuzz/corpus/audit_witness/), written from
docs/formats/witness.md with Python's cryptography (Ed25519), independently of the C++ code.

The fixed fuzz log: Ed25519 seed bytes 0x20..0x3f, leaves SHA-256(0x00 || "0".."9"), and the
witness has cosigned its tree of size 2. The fixed fuzz witness: seed 0x40..0x5f, name
"fuzz.example/w". Fuzz-only keys: they protect nothing.

    python3 tests/fuzz/make_witness_seeds.py tests/fuzz/corpus/audit_witness
"""
import base64
import hashlib
import os
import struct
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def key(first):
    sk = Ed25519PrivateKey.from_private_bytes(bytes(range(first, first + 32)))
    return sk, sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def sha(b):
    return hashlib.sha256(b).digest()


def mth(leaves):  # RFC 6962 2.1
    if not leaves:
        return sha(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return sha(b"\x01" + mth(leaves[:k]) + mth(leaves[k:]))


def subproof(m, leaves, complete):  # RFC 6962 2.1.2
    n = len(leaves)
    if m == n:
        return [] if complete else [mth(leaves)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return subproof(m, leaves[:k], complete) + [mth(leaves[k:])]
    return subproof(m - k, leaves[k:], False) + [mth(leaves[:k])]


def b64(b):
    return base64.b64encode(b).decode()


def key_id(name, alg, pk):
    return sha(name.encode() + b"\n" + bytes([alg]) + pk)[:4]


log_sk, log_pk = key(0x20)
wit_sk, wit_pk = key(0x40)
other_sk, other_pk = key(0x60)
ORIGIN = "enclave-audit-log/" + sha(log_pk).hex()
WITNESS = "fuzz.example/w"
LEAVES = [sha(b"\x00" + c.encode()) for c in "0123456789"]


def checkpoint(size, sk=log_sk, pk=log_pk, origin=ORIGIN):
    text = f"{origin}\n{size}\n{b64(mth(LEAVES[:size]))}\n"
    sig = key_id(origin, 1, pk) + sk.sign(text.encode())
    return text, text + "\n" + f"\u2014 {origin} {b64(sig)}\n"


def cosign(text, t):
    msg = f"cosignature/v1\ntime {t}\n".encode() + text.encode()
    return f"\u2014 {WITNESS} {b64(key_id(WITNESS, 4, wit_pk) + struct.pack('>Q', t) + wit_sk.sign(msg))}\n"


def body(old, proof, note):
    return f"old {old}\n" + "".join(b64(h) + "\n" for h in proof) + "\n" + note


def vkey(name, alg, pk):
    return f"{name}+{key_id(name, alg, pk).hex()}+{b64(bytes([alg]) + pk)}"


def main(out):
    os.makedirs(out, exist_ok=True)
    t2, n2 = checkpoint(2)
    t5, n5 = checkpoint(5)
    _, n9 = checkpoint(9)
    proof = subproof(2, LEAVES[:5], True)
    bad = [proof[0], bytes([proof[1][0] ^ 1]) + proof[1][1:]] + proof[2:]
    _, forged = checkpoint(5, other_sk, other_pk, ORIGIN)
    _, unknown = checkpoint(3, other_sk, other_pk, "enclave-audit-log/" + sha(other_pk).hex())
    post = "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n"
    b = body(2, proof, n5)
    chunked = post + "Transfer-Encoding: chunked\r\n\r\n" + "".join(
        f"{len(b[i:i + 40].encode()):x}\r\n" + b[i:i + 40] + "\r\n" for i in range(0, len(b), 40)) + "0\r\n\r\n"
    seeds = {
        "add-2-to-5": "0" + b,
        "add-2-to-9": "0" + body(2, subproof(2, LEAVES[:9], True), n9),
        "add-same-size": "0" + body(2, [], n2),
        "add-with-cosignature": "0" + body(2, proof, n5 + cosign(t5, 1700000000)),
        "add-old-0": "0" + body(0, [], n5),
        "add-bad-proof": "0" + body(2, bad, n5),
        "add-forged-signature": "0" + body(2, proof, forged),
        "add-unknown-origin": "0" + body(0, [], unknown),
        "http-post": "1\x00" + post + f"Content-Length: {len(b.encode())}\r\n\r\n" + b,
        "http-pipelined-pieces": "1\x07" + chunked + "GET /add-checkpoint HTTP/1.0\r\n\r\n",
        "http-expect": "1\x00" + post + f"Expect: 100-continue\r\nContent-Length: {len(b.encode())}\r\n\r\n" + b,
        "policy-groups": "2" + f"log {vkey(ORIGIN, 1, log_pk)}\n"
                         f"witness X1 {vkey(WITNESS, 4, wit_pk)} http://127.0.0.1:7380\n"
                         f"witness X2 {vkey('fuzz.example/x2', 4, other_pk)}\n"
                         "group X 2 X1 X2\n  # a comment\n\ngroup top any X X1\nquorum top\n",
        "policy-none": "2quorum none\n",
        "answer-cosignature": "3" + cosign(t2, 1700000000),
        "answer-two-lines": "3" + cosign(t2, 1) + f"\u2014 other.example/w {b64(bytes(76))}\n",
        "vkey-cosigner": "v" + vkey(WITNESS, 4, wit_pk),
        "vkey-log": "v" + vkey(ORIGIN, 1, log_pk),
    }
    for name, text in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(text.encode())


if __name__ == "__main__":
    main(sys.argv[1])
