#!/usr/bin/python3
"""Prints the table of a sealed-file benchmark run (JSON of bench/sealed_bench.cc, run
with repetitions and aggregates): median rates and the ours/raw ratios per suite and
chunk size. Usage: bench/report.py build/release/bench-sealed.json"""

import json
import sys

TARGET_OPEN = 0.90  # README: open >= 90% of the raw AEAD rate


def main(path):
    with open(path) as f:
        doc = json.load(f)
    median, cv = {}, {}
    for b in doc["benchmarks"]:
        if b.get("run_type") != "aggregate" or "bytes_per_second" not in b:
            continue
        op, impl, suite, size = b["run_name"].split("/")
        key = (op, impl, suite, size)
        if b["aggregate_name"] == "median":
            median[key] = b["bytes_per_second"]
        elif b["aggregate_name"] == "cv":
            cv[key] = b["bytes_per_second"]
    if not median:
        sys.exit(f"{path}: no median aggregates (run with --benchmark_repetitions=N)")

    ctx = doc["context"]
    reps = max((b.get("repetitions", 1) for b in doc["benchmarks"]), default=1)
    print(f"{ctx['date']}  {ctx['host_name']}  {ctx['num_cpus']} CPUs @ {ctx['mhz_per_cpu']} MHz  "
          f"load {' '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}")
    print(f"median of {reps} repetitions, GB/s = 1e9 plaintext bytes per CPU second, one thread; "
          f"cv = spread of ours over the repetitions")

    def rate(op, impl, suite, size):
        return median.get((op, impl, suite, size))

    def fmt(x):
        return "   -" if x is None else f"{x / 1e9:5.2f}"

    def ratio(a, b):
        return "   -  " if a is None or b is None else f"{a / b:6.1%}"

    sizes = sorted({k[3] for k in median}, key=lambda s: (s.endswith("MiB"), s))
    suites = sorted({k[2] for k in median if k[2] != "any"})
    header = (f"{'suite':<18} {'chunk':>5} | {'open raw':>8} {'ours':>5} {'ours/raw':>8} {'cv':>5} | "
              f"{'seal raw':>8} {'ours':>5} {'ours/raw':>8} | {'file read':>9} {'pread':>5} | {'sodium open':>11}")
    print(header)
    print("-" * len(header))
    below = []
    for suite in suites:
        for size in sizes:
            o_raw, o_ours = rate("open", "raw_evp", suite, size), rate("open", "ours", suite, size)
            s_raw, s_ours = rate("seal", "raw_evp", suite, size), rate("seal", "ours", suite, size)
            o_cv = cv.get(("open", "ours", suite, size))
            pread = rate("file_read", "pread", "aes-256-gcm", size)
            print(f"{suite:<18} {size:>5} | {fmt(o_raw):>8} {fmt(o_ours)} {ratio(o_ours, o_raw):>8} "
                  f"{'-' if o_cv is None else f'{o_cv:.1%}':>5} | "
                  f"{fmt(s_raw):>8} {fmt(s_ours)} {ratio(s_ours, s_raw):>8} | "
                  f"{fmt(rate('file_read', 'ours', suite, size)):>9} {fmt(pread)} | "
                  f"{fmt(rate('open', 'sodium', suite, size)):>11}")
            if o_raw and o_ours and o_ours / o_raw < TARGET_OPEN:
                below.append(f"{suite}/{size}")
    print(f"open/ours >= {TARGET_OPEN:.0%} of open/raw: " + ("yes, every row" if not below else
          "NO for " + ", ".join(below) + " (noisy machine? rerun before drawing conclusions)"))
    print("file read = SealedFileReader Open+Unlock+ReadChunk of a 64 MiB sealed file in the page cache; "
          "pread = the same reads without decryption")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
