#!/usr/bin/env python3
"""Writes the synthetic attestation test data in tests/data/attest/ and the PCR values it
should replay to, computed here with hashlib only (independent of attest/).

  synthetic_crypto_agile.bin   TCG PC Client crypto-agile log: sha1, sha256, sha384 banks
  synthetic_legacy_sha1.bin    legacy SHA-1 log (every event a TCG_PCR_EVENT)
  synthetic_interop.bin        crypto-agile, no EV_NO_ACTION/StartupLocality/DRTM (see INTEROP_EVENTS)
  synthetic_ima_ng.txt         IMA ascii_runtime_measurements, ima-ng template, SHA-1 column
  synthetic_expected.json      {"crypto_agile": {"pcrs": {bank: {index: hex}}, "startup_locality": 3},
                                "legacy_sha1": {...}, "ima": {"pcr10": {bank: hex}}}

Formats: TCG PC Client Platform Firmware Profile (section 10, event log), Linux IMA
(security/integrity/ima/ima_template_lib.c for the ima-ng template data).
Usage: make_eventlog.py OUT_DIR
"""
import hashlib
import json
import struct
import sys

BANKS = [(0x0004, "sha1"), (0x000B, "sha256"), (0x000C, "sha384")]
EV_NO_ACTION = 3
EV_SEPARATOR = 4
EV_S_CRTM_VERSION = 8
EV_IPL = 0xD
EV_EFI_VARIABLE_DRIVER_CONFIG = 0x80000001
EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000003
EV_EFI_ACTION = 0x80000007
EV_EFI_PLATFORM_FIRMWARE_BLOB = 0x80000008


def h(name, data):
    return hashlib.new(name, data).digest()


def uefi_variable_data(guid_le, name, data):
    # UEFI_VARIABLE_DATA: VariableName GUID, UnicodeNameLength u64, VariableDataLength u64,
    # UnicodeName (UTF-16LE, no NUL), VariableData.
    uname = name.encode("utf-16-le")
    return guid_le + struct.pack("<QQ", len(name), len(data)) + uname + data


def uefi_image_load_event():
    # UEFI_IMAGE_LOAD_EVENT: location, length, link-time address, device-path length (0).
    return struct.pack("<QQQQ", 0x7E000000, 0x1A000, 0, 0)


# EFI_GLOBAL_VARIABLE 8BE4DF61-93CA-11D2-AA0D-00E098032B8C, in its in-memory byte order.
EFI_GLOBAL_VARIABLE = struct.pack("<IHH", 0x8BE4DF61, 0x93CA, 0x11D2) + bytes.fromhex("aa0d00e098032b8c")

# (pcr, type, data, extend?) in log order. EV_NO_ACTION events carry non-zero digests on
# purpose: a replay that extends them gets every PCR wrong.
EVENTS = [
    (0, EV_NO_ACTION, b"StartupLocality\x00" + bytes([3]), False),
    (0, EV_S_CRTM_VERSION, "1.0".encode("utf-16-le") + b"\x00\x00", True),
    (0, EV_EFI_PLATFORM_FIRMWARE_BLOB, struct.pack("<QQ", 0xFF000000, 0x200000), True),
    (1, EV_NO_ACTION, b"vendor note, never extended", False),
    (7, EV_EFI_VARIABLE_DRIVER_CONFIG, uefi_variable_data(EFI_GLOBAL_VARIABLE, "SecureBoot", b"\x01"), True),
    (14, 0x00012345, b"an event type this verifier does not know still extends", True),
    (17, EV_EFI_ACTION, b"DRTM PCR starts at 0xFF", True),
]
for pcr in range(8):
    EVENTS.append((pcr, EV_SEPARATOR, b"\x00\x00\x00\x00", True))
EVENTS += [
    (4, EV_EFI_BOOT_SERVICES_APPLICATION, uefi_image_load_event(), True),
    (8, EV_IPL, b"grub_cmd: linux /vmlinuz root=/dev/sda1 ro\x00", True),
    (9, EV_IPL, b"/boot/vmlinuz-6.1.0\x00", True),
]


def initial(pcr, size, locality):
    if 17 <= pcr <= 22:
        return b"\xff" * size
    v = bytearray(size)
    if pcr == 0 and locality is not None:
        v[-1] = locality
    return bytes(v)


def replay(banks, events, locality):
    pcrs = {name: {} for _, name in banks}
    for pcr, etype, data, extend in events:
        if not extend:
            continue
        for _, name in banks:
            size = hashlib.new(name).digest_size
            cur = pcrs[name].get(pcr, initial(pcr, size, locality))
            pcrs[name][pcr] = h(name, cur + h(name, data))
    return {name: {str(k): v.hex() for k, v in sorted(vals.items())} for name, vals in pcrs.items()}


def legacy_event(pcr, etype, digest20, data):
    return struct.pack("<II", pcr, etype) + digest20 + struct.pack("<I", len(data)) + data


# For interop with Debian 12's tpm2_eventlog 5.4, which extends EV_NO_ACTION events
# (tpm2-tools#3224, fixed by #3230), ignores StartupLocality (#3242) and starts DRTM PCRs
# at zero: the same log without those three features, on which every replay must agree.
INTEROP_EVENTS = [e for e in EVENTS if e[3] and not 17 <= e[0] <= 22]


def crypto_agile_log(events=None):
    events = EVENTS if events is None else events
    algs = b"".join(struct.pack("<HH", alg, hashlib.new(name).digest_size) for alg, name in BANKS)
    spec = (b"Spec ID Event03\x00" + struct.pack("<IBBBB", 0, 0, 2, 0, 2) + struct.pack("<I", len(BANKS)) + algs +
            struct.pack("<B", 0))
    out = legacy_event(0, EV_NO_ACTION, b"\x00" * 20, spec)
    for pcr, etype, data, extend in events:
        digests = b""
        for alg, name in BANKS:
            d = h(name, data) if extend else b"\x5a" * hashlib.new(name).digest_size
            digests += struct.pack("<H", alg) + d
        out += struct.pack("<III", pcr, etype, len(BANKS)) + digests + struct.pack("<I", len(data)) + data
    return out


def legacy_log():
    # No StartupLocality in the legacy (TPM 1.2 era) log: PCR 0 starts at zero.
    events = [e for e in EVENTS if e[2][:16] != b"StartupLocality\x00"]
    out = b""
    for pcr, etype, data, extend in events:
        d = h("sha1", data) if extend else b"\x5a" * 20
        out += legacy_event(pcr, etype, d, data)
    return out, events


IMA_FILES = [
    ("sha256", b"boot aggregate stand-in", "boot_aggregate"),
    ("sha256", b"#!/bin/sh\necho trainer\n", "/usr/bin/enclave-train"),
    ("sha256", b"nvidia driver bytes", "/usr/lib/modules/6.1.0/nvidia.ko"),
    ("sha1", b"an old sha1-measured file", "/etc/ld.so.cache"),
    ("sha384", b"a file with spaces in its name", "/opt/app/my file.bin"),
]


def ima_template_data(algo, digest, path):
    d = algo.encode() + b":\x00" + digest
    n = path.encode() + b"\x00"
    return struct.pack("<I", len(d)) + d + struct.pack("<I", len(n)) + n


def ima_log():
    lines, pcr = [], {"sha1": b"\x00" * 20, "sha256": b"\x00" * 32, "sha384": b"\x00" * 48}
    for algo, content, path in IMA_FILES:
        digest = h(algo, content)
        data = ima_template_data(algo, digest, path)
        lines.append("10 %s ima-ng %s:%s %s\n" % (h("sha1", data).hex(), algo, digest.hex(), path))
        for bank in pcr:
            pcr[bank] = h(bank, pcr[bank] + h(bank, data))
    return "".join(lines), {bank: v.hex() for bank, v in pcr.items()}


def main():
    out_dir = sys.argv[1]
    with open(out_dir + "/synthetic_crypto_agile.bin", "wb") as f:
        f.write(crypto_agile_log())
    legacy, legacy_events = legacy_log()
    with open(out_dir + "/synthetic_legacy_sha1.bin", "wb") as f:
        f.write(legacy)
    ima_text, ima_pcr = ima_log()
    with open(out_dir + "/synthetic_ima_ng.txt", "w") as f:
        f.write(ima_text)
    with open(out_dir + "/synthetic_interop.bin", "wb") as f:
        f.write(crypto_agile_log(INTEROP_EVENTS))
    expected = {
        "interop": {"pcrs": replay(BANKS, INTEROP_EVENTS, None), "events": 1 + len(INTEROP_EVENTS)},
        "source": "tests/attest/make_eventlog.py (synthetic; hashlib replay)",
        "crypto_agile": {"pcrs": replay(BANKS, EVENTS, 3), "startup_locality": 3, "events": 1 + len(EVENTS)},
        "legacy_sha1": {"pcrs": replay([(0x0004, "sha1")], legacy_events, None), "events": len(legacy_events)},
        "ima": {"pcr10": ima_pcr, "entries": len(IMA_FILES)},
    }
    with open(out_dir + "/synthetic_expected.json", "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
