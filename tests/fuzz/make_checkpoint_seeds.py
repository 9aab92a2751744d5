#!/usr/bin/env python3
"""Writes the seeds of fuzz_checkpoint (tests/fuzz/corpus/checkpoint/) from the layouts in
docs/training.md ("Checkpoints") and the state encoding of trainer/src/checkpoint.cc
(EncodeTrainState). Deterministic: run it again and the files are the same.

  state-sgd.bin         'S' + the encoding of a small SGD state (decodes; outputs_test checks it)
  v1.ckpt               'E' + a version 1 header and a message that does not authenticate
  v2-one-chunk.ckpt     'E' + a version 2 header (4096-byte chunks) and one chunk
  v2-three-chunks.ckpt  'E' + the same with three chunks
"""
import os
import random
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "checkpoint")
os.makedirs(out, exist_ok=True)
rnd = random.Random(7)

# 2 inputs, binary (one output), hidden [3], ReLU, SGD: P = (2*3 + 3) + (3*1 + 1) = 13.
F, hidden, classes, rows = 2, [3], 2, 4
P = (F * 3 + 3) + (3 * 1 + 1)
b = bytearray()
b += struct.pack("<III", 1, F, classes)           # state version, inputs, classes
b += bytes([1, len(hidden), 0, 0])                 # activation ReLU, hidden count, SGD, no moment2
for h in hidden:
    b += struct.pack("<I", h)
b += struct.pack("<QQQQ", rows, 1, 1, 1)           # train rows, val rows, steps per epoch, step
b += struct.pack("<I", 1)                          # epoch in progress
b += struct.pack("<Q", 1)                          # steps done in it
b += struct.pack("<d", 0.5)                        # loss sum
b += struct.pack("<4Q", 1, 2, 3, 4)                # shuffle stream
b += struct.pack("<I", 1)                          # one finished epoch:
b += struct.pack("<I", 1) + struct.pack("<6d", 0.01, 0.6, 0.5, 0.75, 0.8, 0.1)
b += struct.pack("<4I", 2, 0, 3, 1)                # row order
b += struct.pack("<2f", 0.5, -1.0) + struct.pack("<2f", 2.0, 0.25)  # mean, inv_std
b += struct.pack("<Q", P)
b += struct.pack("<%df" % P, *[rnd.uniform(-1, 1) for _ in range(P)])      # params
b += struct.pack("<%df" % P, *[rnd.uniform(-0.1, 0.1) for _ in range(P)])  # velocity
b += bytes([0xA5])


def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def noise(n):
    return bytes(rnd.getrandbits(8) for _ in range(n))


def v2(length, chunk=4096):
    h = b"ENCLCKPT" + struct.pack("<HH", 2, 1) + bytes(16) + bytes(16) + bytes(32) + struct.pack("<Q", 3)
    h += noise(32) + struct.pack("<IQ", chunk, length)
    assert len(h) == 128
    n = max(1, (length + chunk - 1) // chunk)
    return h + noise(length + 16 * n)


write("state-sgd.bin", b"S" + bytes(b))
write("v2-one-chunk.ckpt", b"E" + v2(300))
write("v2-three-chunks.ckpt", b"E" + v2(2 * 4096 + 10))
h1 = b"ENCLCKPT" + struct.pack("<HH", 1, 1) + bytes(16) + bytes(16) + bytes(32) + struct.pack("<Q", 3)
h1 += bytes(32) + bytes(12) + struct.pack("<Q", 200)
assert len(h1) == 136
write("v1.ckpt", b"E" + h1 + noise(216))
