#!/usr/bin/env python3
"""An independent verifier of the audit log, written only from docs/formats/audit-log.md
(sections 2-4, 6-8), to check that the document is precise enough and that the C++
writer follows it. Usage:

    independent_verify.py [--state STATE.json] LOG_DIR LOG.pub [PROOF.json ...]

With --state, also section 6 steps 0 and 6 against the auditor state (never updated).
Exits 0 when the log and every proof verify, 1 with a message otherwise, 77 when no
Ed25519 implementation (python3-cryptography or python3-nacl) is installed.
"""
import base64
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
CHAINED_LABEL = b"enclave-audit-log/v2/tree-head\x00"


def signature_input(log_id, size, ts, root):
    return LABEL + log_id + struct.pack("<QQ", size, ts) + root


def chained_signature_input(log_id, index, prev, size, ts, root):
    return CHAINED_LABEL + log_id + struct.pack("<Q", index) + prev + struct.pack("<QQ", size, ts) + root


def checkpoint_body(log_id, size, root):
    """Section 4.1: the C2SP tlog-checkpoint body."""
    return ("enclave-audit-log/%s\n%d\n%s\n" % (log_id.hex(), size, base64.b64encode(root).decode())).encode()


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


def verify_consistency(m, n, old_root, new_root, path):
    """RFC 9162 2.1.4.2, with the trivial cases of section 8."""
    if m > n:
        return False
    if m == 0:
        return not path
    if m == n:
        return not path and old_root == new_root
    if m & (m - 1) == 0:  # m is a power of two: the old root is the first node
        path = [old_root] + path
    if not path:
        return False
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


def open_checkpoint(note, pk, log_id):
    """Section 4.1: the log's signature line must verify; returns (size, root)."""
    origin = "enclave-audit-log/" + log_id.hex()
    text, _, sigs = note.rpartition("\n\n")
    text += "\n"
    key_hash = sha256(origin.encode() + b"\n\x01" + pk)[:4]
    ok = False
    for line in sigs.splitlines():
        dash, name, b64 = line.split(" ")
        blob = base64.b64decode(b64)
        if dash == "\u2014" and name == origin and blob[:4] == key_hash:
            ok = ed25519_verify(pk, blob[4:], text.encode())
    lines = text.split("\n")
    if not ok or len(lines) != 4 or lines[0] != origin or lines[3] != "":
        return None
    return int(lines[1]), base64.b64decode(lines[2])


def load_state(path, pk, log_id):
    """Section 7; section 6 step 0: the state must be for this log and its head must verify."""
    st = json.load(open(path))
    th = st.get("tree_head") if isinstance(st, dict) else None
    if (not isinstance(st, dict) or st.get("format") != "enclave-audit-auditor-state" or st.get("version") != 1
            or not isinstance(th, dict)):
        fail("state file: not an auditor state (format, version, tree_head)")
    size, ts = th.get("tree_size"), th.get("timestamp_ms")
    if type(size) is not int or type(ts) is not int or size < 0 or ts < 0:
        fail("state file: tree_size/timestamp_ms")
    if bytes.fromhex(st["log_id"]) != log_id:
        fail("state file: for another log")
    root = bytes.fromhex(th["root"])
    if "head_index" in th:
        msg = chained_signature_input(log_id, th["head_index"], bytes.fromhex(th["previous"]), size, ts, root)
    else:
        msg = signature_input(log_id, size, ts, root)
    if not ed25519_verify(pk, bytes.fromhex(th["signature"]), msg):
        fail("state file: the accepted tree head's signature does not verify")
    return size, ts, root


def main():
    args = sys.argv[1:]
    state_path = None
    if args[:1] == ["--state"]:
        state_path, args = args[1], args[2:]
    log_dir, pub_path, proofs = args[0], args[1], args[2:]
    pub = json.load(open(pub_path))
    pk = bytes.fromhex(pub["public_key"])
    log_id = sha256(pk)
    if bytes.fromhex(pub["log_id"]) != log_id:
        fail("public key file: log_id is not SHA-256(public_key)")
    accepted = load_state(state_path, pk, log_id) if state_path else None

    data = open(log_dir + "/audit.log", "rb").read()
    if accepted and len(data) < 48 + 21 * accepted[0] + 132:
        fail("rollback or truncation: %d bytes cannot hold the accepted tree of size %d" % (len(data), accepted[0]))
    version, flags = struct.unpack("<II", data[8:16])
    if data[:8] != b"EAUDITLG" or version not in (1, 2) or flags != 0 or data[16:48] != log_id:
        fail("header")
    pos, leaves, heads = 48, [], []
    chained_seen, prev_payload, entries_since_head = False, None, 0
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
            if not heads:
                fail("offset %d: the log does not begin with the tree head of size 0" % pos)
            entries_since_head += 1
            entry = json.loads(payload.decode("utf-8"))
            if entry.get("v") != 1 or entry.get("seq") != len(leaves):
                fail("entry at offset %d: v/seq" % pos)
            leaves.append(leaf_hash(payload))
        elif (rtype == 2 and length == 112) or (rtype == 3 and length == 216):
            size, ts = struct.unpack("<QQ", payload[:16])
            if rtype == 2:
                if version != 1 or chained_seen:
                    fail("offset %d: a legacy tree head in a version 2 log or after a chained head" % pos)
                if heads and entries_since_head == 0:
                    fail("offset %d: a duplicated legacy tree head" % pos)
                root, sig = payload[16:48], payload[48:112]
                if not ed25519_verify(pk, sig, signature_input(log_id, size, ts, root)):
                    fail("tree head at offset %d: signature" % pos)
            else:
                (index,) = struct.unpack("<Q", payload[16:24])
                prev, root, sig, note_sig = payload[24:56], payload[56:88], payload[88:152], payload[152:216]
                if not ed25519_verify(pk, sig, chained_signature_input(log_id, index, prev, size, ts, root)):
                    fail("tree head at offset %d: signature" % pos)
                if not ed25519_verify(pk, note_sig, checkpoint_body(log_id, size, root)):
                    fail("tree head at offset %d: checkpoint signature" % pos)
                want_prev = sha256(prev_payload) if heads else b"\x00" * 32
                if index != len(heads) or prev != want_prev:
                    fail("tree head at offset %d: head index or previous head (deleted, duplicated, reordered)" % pos)
                chained_seen = True
            prev_payload, entries_since_head = payload, 0
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
    if accepted:
        m, ts, r = accepted
        if m > heads[-1][0]:
            fail("rollback or truncation: the latest tree head has %d entries, the state accepted %d"
                 % (heads[-1][0], m))
        # Holding every leaf, checking a consistency proof generated from them (step 6) is
        # checking that the first m leaves hash to the accepted root.
        if mth(leaves[:m]) != r:
            fail("fork: the first %d entries do not hash to the accepted root" % m)
        if heads[-1][1] < ts:
            fail("the latest tree head is older than the accepted one")

    for p in proofs:
        b = json.load(open(p))
        if b.get("format") == "enclave-audit-proof":
            check_proof(p, b, pk, log_id)
            continue
        entry = b["entry"].encode("utf-8")
        th = b["tree_head"]
        root = bytes.fromhex(th["root"])
        if bytes.fromhex(b["log_id"]) != log_id:
            fail(p + ": log id")
        if "head_index" in th:
            msg = chained_signature_input(log_id, th["head_index"], bytes.fromhex(th["previous"]), th["tree_size"],
                                          th["timestamp_ms"], root)
        else:
            msg = signature_input(log_id, th["tree_size"], th["timestamp_ms"], root)
        if not ed25519_verify(pk, bytes.fromhex(th["signature"]), msg):
            fail(p + ": tree head signature")
        if json.loads(entry)["seq"] != b["entry_index"]:
            fail(p + ": seq")
        path = [bytes.fromhex(h) for h in b["inclusion_path"]]
        if not verify_inclusion(b["entry_index"], th["tree_size"], leaf_hash(entry), path, root):
            fail(p + ": inclusion path")
    print("OK: %d entries, %d tree heads, %d proofs verified independently" % (len(leaves), len(heads), len(proofs)))


def check_proof(name, b, pk, log_id):
    """Section 8, with the log's key."""
    path = [bytes.fromhex(h) for h in b["path"]]
    if b["proof"] == "inclusion":
        if open_checkpoint(b["checkpoint"], pk, log_id) != (b["tree_size"], bytes.fromhex(b["root"])):
            fail(name + ": checkpoint")
        entry = b["entry"].encode("utf-8")
        if json.loads(entry)["seq"] != b["leaf_index"]:
            fail(name + ": seq")
        if not verify_inclusion(b["leaf_index"], b["tree_size"], leaf_hash(entry), path, bytes.fromhex(b["root"])):
            fail(name + ": inclusion path")
    else:
        old, new = (b["old_size"], bytes.fromhex(b["old_root"])), (b["new_size"], bytes.fromhex(b["new_root"]))
        if open_checkpoint(b["old_checkpoint"], pk, log_id) != old or open_checkpoint(b["new_checkpoint"], pk, log_id) != new:
            fail(name + ": checkpoints")
        if not verify_consistency(old[0], new[0], old[1], new[1], path):
            fail(name + ": consistency path")


main()
