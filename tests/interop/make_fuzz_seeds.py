#!/usr/bin/python3
"""Writes the seed corpus of tests/fuzz/fuzz_model_export.cc with the independent Python
implementation (enclave_decode.py), sealed to the fuzz target's fixed X25519 key (private
bytes 0x40..0x5f; fuzz-only, protects nothing). Salts, ephemeral keys and DEKs are random,
so the bytes change on every run.

  /usr/bin/python3 tests/interop/make_fuzz_seeds.py tests/fuzz/corpus/model_export
"""
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import enclave_decode as dec  # noqa: E402

FUZZ_PRIVATE = bytes(range(0x40, 0x60))


def main(out):
    os.makedirs(out, exist_ok=True)
    pub = {'keystore_id': bytes(range(16)), 'key_id': bytes(range(16, 32)), 'name': 'fuzz-export',
           'public_key': dec.x25519_base(FUZZ_PRIVATE)}
    doc = {'format': 'enclave-export-public-key', 'version': 1, 'algorithm': 'x25519',
           'keystore_id': pub['keystore_id'].hex(), 'key_id': pub['key_id'].hex(), 'name': pub['name'],
           'public_key': pub['public_key'].hex(),
           'fingerprint': dec.fingerprint(pub['keystore_id'], pub['key_id'], pub['public_key']).hex()}
    seeds = {'valid-public-key.json': json.dumps(doc, indent=2, sort_keys=True).encode() + b'\n'}
    bad = dict(doc, fingerprint='00' * 32)
    seeds['invalid-public-key-fingerprint.json'] = json.dumps(bad).encode()
    seeds['invalid-public-key-version.json'] = json.dumps(dict(doc, version=2)).encode()
    seeds['valid-model-aes-3-chunks.sealed'] = dec.seal_model(pub, bytes(range(100)), 'fuzz/v1', 1, 40, 'fuzz.model',
                                                              bytes(range(32)), created=1790000000)
    seeds['valid-model-chacha-empty.sealed'] = dec.seal_model(pub, b'', 'fuzz/empty', 2, 64, 'empty',
                                                              created=1790000000)
    seeds['valid-model-one-chunk.sealed'] = dec.seal_model(pub, b'model bytes', 'x', 1, 1 << 20, 'm',
                                                           created=1790000000)
    h = dec.parse_header(seeds['valid-model-aes-3-chunks.sealed'])
    seeds['metadata-valid.bin'] = h['metadata']
    for name, data in seeds.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
        print('wrote %s (%d bytes)' % (name, len(data)))


if __name__ == '__main__':
    main(sys.argv[1])
