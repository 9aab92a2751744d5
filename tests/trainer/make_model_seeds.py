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


def schema_v2(features, label, classes):
    """features: (name, kind, missing_allowed, categories) in column order, label last;
    classes None: a regression target (task 1, no class list)."""
    out = b"ESCH" + struct.pack("<HBI", 2, 0 if classes is not None else 1, len(features) + 1)
    for name, kind, missing, cats in features:
        out += struct.pack("<BBH", kind, 1 if missing else 0, len(name)) + name.encode()
        if kind == 3:
            out += struct.pack("<I", len(cats)) + b"".join(struct.pack("<H", len(c)) + c.encode() for c in cats)
    out += struct.pack("<BBH", 2, 0, len(label)) + label.encode()
    if classes is not None:
        out += struct.pack("<I", len(classes)) + b"".join(struct.pack("<H", len(c)) + c.encode() for c in classes)
    return out


def needs_v2_schema(features, classes):
    return classes is None or any(kind == 3 or m for (_, kind, m, _) in features)


def any_schema(features, label, classes):
    """The schema's one encoding: version 2 only when it needs it."""
    if needs_v2_schema(features, classes):
        return schema_v2(features, label, classes)
    return schema([(n, kind) for (n, kind, _, _) in features], label, classes)


def model_v2(features, label, classes, hidden, activation, fills, indicators, impute=0, digest=True,
             target=(0.0, 1.0), threshold=None):
    """Version 2: the inputs are the expanded row (one column per numeric or yes/no
    feature, k + 1 per categorical one, then an indicator where flagged). With a
    threshold: version 3 (a binary model's decision threshold after the indicators)."""
    f = sum((len(c) + 1 if kind == 3 else 1) + ind for (_, kind, _, c), ind in zip(features, indicators))
    k = len(classes) if classes is not None else 0  # 0: regression
    outputs = 1 if k <= 2 else k
    sizes = [f] + hidden + [outputs]
    params = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
    s = any_schema(features, label, classes)
    version = 2 if threshold is None else 3
    body = b"ENCLMODL" + struct.pack("<HHIIBBBB", version, 0, f, k, activation, len(hidden), 0, impute)
    body += b"".join(struct.pack("<I", h) for h in hidden)
    body += struct.pack("<I", len(s)) + s
    body += struct.pack("<%df" % len(fills), *fills) + bytes(indicators)
    if classes is None:
        body += struct.pack("<ff", *target)  # label_mean, label_scale
    if threshold is not None:
        body += struct.pack("<f", threshold)
    body += struct.pack("<%df" % f, *[0.5 * i for i in range(f)])            # mean
    body += struct.pack("<%df" % f, *[1.0 + 0.25 * i for i in range(f)])     # inv_std
    body += struct.pack("<%df" % params, *[((i % 5) - 2) / 10 for i in range(params)])
    return body + (hashlib.sha256(body).digest() if digest else b"\0" * 32)


def model_trees(features, label, classes, booster, rounds, impute=3, fills=None, length=None, threshold=None):
    """Family 1 (gradient-boosted trees): the inputs keep missing values, categories
    one-hot (k + 1 columns), no indicators; fills and indicators 0; then rounds, the
    booster's length and bytes (opaque here: XGBoost reads them when a model predicts)."""
    f = sum(len(c) + 1 if kind == 3 else 1 for (_, kind, _, c) in features)
    k = len(classes) if classes is not None else 0
    s = any_schema(features, label, classes)
    body = b"ENCLMODL" + struct.pack("<HHIIBBBB", 2 if threshold is None else 3, 0, f, k, 0, 0, 1, impute)
    body += struct.pack("<I", len(s)) + s
    body += struct.pack("<%df" % len(features), *(fills or [0.0] * len(features))) + bytes(len(features))
    if threshold is not None:
        body += struct.pack("<f", threshold)
    body += struct.pack("<II", rounds, len(booster) if length is None else length) + booster
    return body + hashlib.sha256(body).digest()


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
        "invalid-version.model": model(two, "y", ["no", "yes"], [], 1, version=4),
        # version 2 of a schema that needs no preprocessing: that model is version 1
        "invalid-version-2-of-plain-data.model": model(two, "y", ["no", "yes"], [], 1, version=2),
        "invalid-activation.model": model(two, "y", ["no", "yes"], [2], 0),
    }
    clinic = [("age", 0, True, []), ("smoker", 1, False, []), ("ward", 3, True, ["A", "B", "C"])]
    seeds["valid-v2-impute-one-hot.model"] = model_v2(clinic, "y", ["no", "yes"], [3], 1, [42.5, 0.5, 2.0], [1, 0, 1])
    seeds["valid-v2-mean-no-indicators.model"] = model_v2(clinic, "y", ["a", "b", "c"], [], 1, [40.0, 0.0, 0.0],
                                                          [0, 0, 0], impute=1)
    seeds["invalid-v2-fill-not-a-category.model"] = model_v2(clinic, "y", ["no", "yes"], [], 1, [1.0, 0.0, 3.0],
                                                             [1, 0, 1])
    seeds["invalid-v2-indicator-without-missing.model"] = model_v2(clinic, "y", ["no", "yes"], [], 1,
                                                                   [1.0, 0.0, 0.0], [1, 1, 1])
    seeds["invalid-v2-keep-missing-network.model"] = model_v2(clinic, "y", ["no", "yes"], [], 1, [1.0, 0.0, 0.0],
                                                              [0, 0, 0], impute=3)
    plain = [("age", 0, False, []), ("dose", 0, False, [])]
    seeds["valid-v2-regression.model"] = model_v2(plain, "length_of_stay", None, [4], 2, [50.0, 2.5], [0, 0],
                                                  target=(6.5, 3.25))
    seeds["invalid-v2-regression-zero-scale.model"] = model_v2(plain, "length_of_stay", None, [], 1, [50.0, 2.5],
                                                               [0, 0], target=(6.5, 0.0))
    booster = b"{UBJ booster bytes: opaque to the model file}"
    seeds["valid-v2-trees-one-hot.model"] = model_trees(clinic, "y", ["no", "yes"], booster, 40)
    seeds["valid-v2-trees-plain-regression.model"] = model_trees(plain, "length_of_stay", None, booster, 7)
    seeds["valid-v2-trees-plain-classification.model"] = model_trees(plain, "y", ["a", "b", "c"], booster, 3)
    seeds["invalid-v2-trees-imputing.model"] = model_trees(clinic, "y", ["no", "yes"], booster, 40, impute=0)
    seeds["invalid-v2-trees-fill.model"] = model_trees(clinic, "y", ["no", "yes"], booster, 40, fills=[1.0, 0.0, 0.0])
    seeds["invalid-v2-trees-booster-length.model"] = model_trees(clinic, "y", ["no", "yes"], booster, 40,
                                                                 length=len(booster) + 1)
    seeds["invalid-v2-trees-no-rounds.model"] = model_trees(clinic, "y", ["no", "yes"], booster, 0)
    # Version 3: a binary model's decision threshold (not 0.5), any data, either family.
    plain_bin = [("x1", 0, False, []), ("flag", 1, False, []), ("x2", 0, False, [])]
    seeds["valid-v3-logreg-threshold.model"] = model_v2(plain_bin, "y", ["no", "yes"], [], 1, [0.0, 0.0, 0.0],
                                                        [0, 0, 0], threshold=0.3125)
    seeds["valid-v3-impute-threshold.model"] = model_v2(clinic, "y", ["no", "yes"], [3], 1, [42.5, 0.5, 2.0],
                                                        [1, 0, 1], threshold=0.0)
    seeds["valid-v3-trees-threshold.model"] = model_trees(clinic, "y", ["no", "yes"], booster, 40, threshold=0.75)
    seeds["invalid-v3-threshold-half.model"] = model_v2(plain_bin, "y", ["no", "yes"], [], 1, [0.0, 0.0, 0.0],
                                                        [0, 0, 0], threshold=0.5)
    seeds["invalid-v3-threshold-above-one.model"] = model_v2(clinic, "y", ["no", "yes"], [], 1, [42.5, 0.5, 2.0],
                                                             [1, 0, 1], threshold=1.5)
    seeds["invalid-v3-three-classes.model"] = model_v2(clinic, "y", ["a", "b", "c"], [], 1, [40.0, 0.0, 0.0],
                                                       [0, 0, 0], impute=1, threshold=0.25)
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
