#!/usr/bin/env python3
"""An independent verifier of the audit log, written only from docs/formats/audit-log.md
(sections 2-4 and 8), to check that the document is precise enough and that the C++
writer follows it. Usage:

    independent_verify.py LOG_DIR LOG.pub [PROOF.json ...]

Exits 0 when the log and every proof verify, 1 with a message otherwise, 77 when no
Ed25519 implementation (python3-cryptography or python3-nacl) is installed.
"""
import hashlib
import json
import struct
import sys

try:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    def ed25519_verify(pk, sig, msg):
        try:
            Ed25519PublicKey.from_public_bytes(pk).verify(sig, msg)
            return True
        except Exception:
            return False
except ImportError:
    try:
        import nacl.exceptions
        import nacl.signing

        def ed25519_verify(pk, sig, msg):
            try:
                nacl.signing.VerifyKey(pk).verify(msg, sig)
                return True
            except nacl.exceptions.BadSignatureError:
                return False
    except ImportError:
        print("SKIP: neither python3-cryptography nor python3-nacl is installed")
        sys.exit(77)


def sha256(b):
    return hashlib.sha256(b).digest()


def leaf_hash(entry):
    return sha256(b"\x00" + entry)


def node_hash(l, r):
    return sha256(b"\x01" + l + r)


def mth(leaves):
    """RFC 6962 2.1, recursively over leaf hashes."""
    n = len(leaves)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


LABEL = b"enclave-audit-log/v1/tree-head\x00"


def signature_input(log_id, size, ts, root):
    return LABEL + log_id + struct.pack("<QQ", size, ts) + root


def verify_inclusion(index, size, leaf, path, root):
    """RFC 9162 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def main():
    log_dir, pub_path, proofs = sys.argv[1], sys.argv[2], sys.argv[3:]
    pub = json.load(open(pub_path))
    pk = bytes.fromhex(pub["public_key"])
    log_id = sha256(pk)
    if bytes.fromhex(pub["log_id"]) != log_id:
        fail("public key file: log_id is not SHA-256(public_key)")

    data = open(log_dir + "/audit.log", "rb").read()
    if data[:8] != b"EAUDITLG" or struct.unpack("<II", data[8:16]) != (1, 0) or data[16:48] != log_id:
        fail("header")
    pos, leaves, heads = 48, [], []
    while pos < len(data):
        rec = data[pos:]
        if rec[:4] != b"EAR1" or rec[5:8] != b"\x00\x00\x00" or len(rec) < 20:
            fail("record framing at offset %d" % pos)
        rtype = rec[4]
        (length,) = struct.unpack("<I", rec[8:12])
        total = 12 + length + 8
        if len(rec) < total or sha256(rec[: 12 + length])[:8] != rec[12 + length : total]:
            fail("record check at offset %d" % pos)
        payload = rec[12 : 12 + length]
        if rtype == 1:
            entry = json.loads(payload.decode("utf-8"))
            if entry.get("v") != 1 or entry.get("seq") != len(leaves):
                fail("entry at offset %d: v/seq" % pos)
            leaves.append(leaf_hash(payload))
        elif rtype == 2 and length == 112:
            size, ts = struct.unpack("<QQ", payload[:16])
            root, sig = payload[16:48], payload[48:112]
            if not ed25519_verify(pk, sig, signature_input(log_id, size, ts, root)):
                fail("tree head at offset %d: signature" % pos)
            if size != len(leaves) or root != mth(leaves):
                fail("tree head at offset %d: size/root" % pos)
            if heads and ts < heads[-1][1]:
                fail("tree head at offset %d: timestamp went back" % pos)
            heads.append((size, ts, root))
        else:
            fail("record type/length at offset %d" % pos)
        pos += total
    if not heads or heads[-1][0] != len(leaves):
        fail("entries after the last tree head")

    for p in proofs:
        b = json.load(open(p))
        entry = b["entry"].encode("utf-8")
        th = b["tree_head"]
        root = bytes.fromhex(th["root"])
        if bytes.fromhex(b["log_id"]) != log_id:
            fail(p + ": log id")
        if not ed25519_verify(pk, bytes.fromhex(th["signature"]),
                              signature_input(log_id, th["tree_size"], th["timestamp_ms"], root)):
            fail(p + ": tree head signature")
        if json.loads(entry)["seq"] != b["entry_index"]:
            fail(p + ": seq")
        path = [bytes.fromhex(h) for h in b["inclusion_path"]]
        if not verify_inclusion(b["entry_index"], th["tree_size"], leaf_hash(entry), path, root):
            fail(p + ": inclusion path")
    print("OK: %d entries, %d tree heads, %d proofs verified independently" % (len(leaves), len(heads), len(proofs)))


main()
