#!/usr/bin/env python3
"""Writes the model-file fuzz seeds (tests/fuzz/corpus/model_file/) from the format
description alone (docs/formats/model.md): an independent encoder, so the seeds double as
a check of the document. `valid-*` seeds must parse (trainer_outputs_test checks it),
`invalid-*` must not.

    python3 tests/trainer/make_model_seeds.py tests/fuzz/corpus/model_file
"""
import hashlib
import os
import struct
import sys


def schema(features, label, classes):
    out = struct.pack("<I", len(features) + 1)
    for name, kind in features:
        out += struct.pack("<BH", kind, len(name)) + name.encode()
    out += struct.pack("<BH", 2, len(label)) + label.encode()
    out += struct.pack("<I", len(classes))
    for c in classes:
        out += struct.pack("<H", len(c)) + c.encode()
    return out


def model(features, label, classes, hidden, activation, seed=1.0, version=1, digest=True):
    f, k = len(features), len(classes)
    outputs = 1 if k == 2 else k
    sizes = [f] + hidden + [outputs]
    params = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
    s = schema(features, label, classes)
    body = b"ENCLMODL" + struct.pack("<HHIIBBH", version, 0, f, k, activation, len(hidden), 0)
    body += b"".join(struct.pack("<I", h) for h in hidden)
    body += struct.pack("<I", len(s)) + s
    body += struct.pack("<%df" % f, *[0.5 * i for i in range(f)])            # mean
    body += struct.pack("<%df" % f, *[1.0 + 0.25 * i for i in range(f)])     # inv_std
    body += struct.pack("<%df" % params, *[seed * ((i % 7) - 3) / 10 for i in range(params)])
    return body + (hashlib.sha256(body).digest() if digest else b"\0" * 32)


def main(out):
    os.makedirs(out, exist_ok=True)
    two = [("x1", 0), ("flag", 1), ("x2", 0)]
    seeds = {
        "valid-logreg.model": model(two, "y", ["no", "yes"], [], 1),
        "valid-mlp-2-layers-tanh.model": model(two, "y", ["neg", "pos"], [4, 3], 2),
        "valid-softmax-3-classes.model": model([("a", 0), ("b", 0)], "species", ["r", "g", "b"], [5], 3),
        "invalid-digest.model": model(two, "y", ["no", "yes"], [], 1, digest=False),
        "invalid-version.model": model(two, "y", ["no", "yes"], [], 1, version=2),
        "invalid-activation.model": model(two, "y", ["no", "yes"], [2], 0),
    }
    good = seeds["valid-logreg.model"]
    seeds["invalid-truncated.model"] = good[:-1]
    body = bytearray(good[:-32])
    struct.pack_into("<I", body, 16, 3)  # 3 classes, the schema has 2
    seeds["invalid-classes.model"] = bytes(body) + hashlib.sha256(bytes(body)).digest()
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
