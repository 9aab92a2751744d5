#!/usr/bin/python3
"""Interop tests between `enclave-data` (C++) and the independent Python decoder
(enclave_decode.py, written from docs/formats/*.md). Registered with CTest by
tests/interop/CMakeLists.txt; each subcommand is one test:

  samples  keystore init, seal both sample CSVs with both suites, decode with Python,
           compare with `enclave-data open` byte for byte (and inspect --json field by field)
  tamper   one flipped byte anywhere in a header, in ciphertext and in tags; truncation,
           extension, chunk swap, wrong passphrase: the Python decoder rejects each, with the
           same exit code as `enclave-data verify`
  fixture  the worked example under tests/data/dataset/ reads with both implementations
  docs     every value quoted in the documents' worked examples matches the fixture

Passphrases travel through file descriptors only (--passphrase-fd), never argv.
Exit 77 (CTest SKIP_RETURN_CODE) when Python lacks `cryptography` or `nacl`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
try:
    import enclave_decode as dec  # noqa: E402
except ImportError as e:  # pragma: no cover
    print('SKIP: %s (run with Debian /usr/bin/python3: python3-cryptography, python3-nacl)' % e)
    sys.exit(77)

PASSPHRASE = b'interop test passphrase 0123'
SAMPLES = [
    ('breast_cancer_wisconsin.csv', 'diagnosis', 'malignant', 'samples:breast-cancer'),
    ('credit_card_applications.csv', 'card', 'yes', 'samples:credit-card'),
]
SUITES = ['aes-256-gcm', 'chacha20-poly1305']
INSPECT_FIELDS = ['format_version', 'dataset_id', 'suite', 'keystore_id', 'key_id', 'rows', 'chunk_bytes',
                  'chunks', 'payload_bytes', 'file_bytes', 'sha256', 'schema']
failures = []


def check(cond, what):
    if cond:
        print('ok    ' + what)
    else:
        print('FAIL  ' + what)
        failures.append(what)


class Tool:
    """Runs enclave-data with the passphrase on an inherited file descriptor."""

    def __init__(self, exe, passphrase_file):
        self.exe, self.passphrase_file = exe, passphrase_file

    def run(self, *args, passphrase=True, expect=0):
        argv = [self.exe] + list(args)
        if passphrase:
            with open(self.passphrase_file, 'rb') as f:
                argv += ['--passphrase-fd', str(f.fileno())]
                p = subprocess.run(argv, capture_output=True, pass_fds=(f.fileno(),))
        else:
            p = subprocess.run(argv, capture_output=True)
        if expect is not None and p.returncode != expect:
            raise RuntimeError('%s -> exit %d (expected %d)\n%s' % (' '.join(argv), p.returncode, expect,
                                                                    p.stderr.decode(errors='replace')))
        return p


def py_decode(sealed, keystore_path, passphrase_file, out):
    """The Python decoder as a separate process, passphrase on a file descriptor: its exit code."""
    with open(passphrase_file, 'rb') as f:
        p = subprocess.run([sys.executable, os.path.join(HERE, 'enclave_decode.py'), 'decode', sealed,
                            '--keystore', keystore_path, '--passphrase-fd', str(f.fileno()), '--out', out],
                           capture_output=True, pass_fds=(f.fileno(),))
    if p.returncode != 0:
        sys.stdout.write(p.stderr.decode(errors='replace'))
    return p.returncode


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def write(path, data):
    with open(path, 'wb') as f:
        f.write(data)


def make_keystore(tool, work):
    ks = os.path.join(work, 'tenant.keystore.json')
    tool.run('keystore', 'init', '--keystore', ks, '--kdf-opslimit', '2', '--kdf-memlimit-mib', '19')
    return ks


def compare_inspect(tool, sealed, label):
    c = json.loads(tool.run('inspect', '--json', sealed, passphrase=False).stdout)
    p = dec.header_json(dec.inspect(read(sealed)))
    p['sha256'] = __import__('hashlib').sha256(read(sealed)).hexdigest()
    for k in INSPECT_FIELDS:
        check(c.get(k) == p.get(k), '%s: inspect field %s agrees (%s)' % (label, k, json.dumps(p.get(k))[:60]))


def cmd_samples(a, work):
    passfile = os.path.join(work, 'pass')
    write(passfile, PASSPHRASE + b'\n')
    tool = Tool(a.enclave_data, passfile)
    ks = make_keystore(tool, work)
    cases = [(s, suite, None) for s in SAMPLES for suite in SUITES]
    cases.append((SAMPLES[1], 'chacha20-poly1305', '100'))  # many chunks, a short last one
    cases.append((SAMPLES[0], 'aes-256-gcm', '1'))          # one record per chunk
    for (csv, label, positive, ds), suite, chunk_records in cases:
        name = '%s-%s%s' % (ds.split(':')[1], suite, '-c' + chunk_records if chunk_records else '')
        sealed = os.path.join(work, name + '.sealed')
        args = ['seal', '--csv', os.path.join(a.samples, csv), '--label', label, '--positive', positive,
                '--suite', suite, '--dataset-id', ds + ':' + suite, '--keystore', ks, '--out', sealed]
        if chunk_records:
            args += ['--chunk-records', chunk_records]
        tool.run(*args)
        ref = os.path.join(work, name + '.ref.csv')
        tool.run('open', sealed, '--keystore', ks, '--out', ref)
        out = os.path.join(work, name + '.py.csv')
        rc = py_decode(sealed, ks, passfile, out)
        check(rc == 0, '%s: Python decoder opens it' % name)
        if rc == 0:
            check(read(out) == read(ref), '%s: Python CSV == enclave-data open CSV, byte for byte (%d bytes)'
                  % (name, len(read(ref))))
        compare_inspect(tool, sealed, name)
        # One flipped byte in the last chunk's ciphertext: rejected as an authentication failure.
        data = bytearray(read(sealed))
        data[-20] ^= 0x01
        bad = os.path.join(work, name + '.flipped.sealed')
        write(bad, bytes(data))
        rc = py_decode(bad, ks, passfile, os.path.join(work, name + '.flipped.csv'))
        check(rc == dec.EXIT_AUTH_FAILED, '%s: Python decoder rejects one flipped byte (exit %d)' % (name, rc))


def cmd_tamper(a, work):
    """Flips every header byte of the worked example, and bytes of each chunk, and compares
    the Python decoder's verdict with `enclave-data verify`'s exit code."""
    fixture = os.path.join(a.fixtures, 'interop_example')
    passfile = fixture + '.passphrase'
    ks_path = fixture + '.keystore.json'
    tool = Tool(a.enclave_data, passfile)
    good = read(fixture + '.sealed')
    ks = dec.Keystore(ks_path, dec.read_passphrase_bytes(read(passfile)))
    h = dec.parse_header(good)

    def py_code(data):
        try:
            dec.decode_to_csv(data, ks)
            return 0
        except dec.DecodeError as e:
            return e.code

    def cxx_code(data, tag):
        path = os.path.join(work, 'tampered-%s.sealed' % tag)
        write(path, data)
        return tool.run('verify', path, '--keystore', ks_path, expect=None).returncode

    check(py_code(good) == 0 and cxx_code(good, 'none') == 0, 'untouched example verifies in both')
    mutations = []
    for off in range(len(good)):
        for bit in (0x01, 0x80):
            if off >= h['header_length'] and bit == 0x80:
                continue
            d = bytearray(good)
            d[off] ^= bit
            mutations.append(('flip byte %d ^0x%02x' % (off, bit), bytes(d)))
    mutations.append(('truncated by one byte', good[:-1]))
    mutations.append(('truncated to the header', good[:h['header_length']]))
    mutations.append(('truncated inside the header', good[:100]))
    mutations.append(('one byte appended', good + b'\x00'))
    mutations.append(('an extra copy of the last chunk appended', good + good[dec.chunk_offset(h, 1):]))
    c0 = good[dec.chunk_offset(h, 0):dec.chunk_offset(h, 1)]
    c1 = good[dec.chunk_offset(h, 1):]
    mutations.append(('chunk 0 duplicated over a (shorter) chunk 1', good[:dec.chunk_offset(h, 1)] + c0[:len(c1)]))
    mutations.append(('chunks swapped', good[:h['header_length']] + c1 + c0))
    disagreements = 0
    rejected = 0
    for i, (what, data) in enumerate(mutations):
        p, c = py_code(data), cxx_code(data, str(i))
        rejected += p != 0
        if p == 0:
            check(False, 'Python decoder rejects: %s' % what)
        if p != c:
            disagreements += 1
            check(False, '%s: Python exit %d, enclave-data verify exit %d' % (what, p, c))
    check(rejected == len(mutations), 'Python decoder rejects all %d mutations' % len(mutations))
    check(disagreements == 0, 'Python decoder and enclave-data verify give the same exit code for all of them')
    # Wrong passphrase: 5 in both.
    wrong = os.path.join(work, 'wrong-pass')
    write(wrong, b'not the passphrase at all\n')
    try:
        dec.Keystore(ks_path, b'not the passphrase at all')
        p = 0
    except dec.DecodeError as e:
        p = e.code
    c = Tool(a.enclave_data, wrong).run('verify', fixture + '.sealed', '--keystore', ks_path, expect=None).returncode
    check(p == c == dec.EXIT_PERMISSION_DENIED, 'wrong passphrase: exit 5 in both (python %d, C++ %d)' % (p, c))


def cmd_fixture(a, work):
    fixture = os.path.join(a.fixtures, 'interop_example')
    tool = Tool(a.enclave_data, fixture + '.passphrase')
    sealed, ks = fixture + '.sealed', fixture + '.keystore.json'
    compare_inspect(tool, sealed, 'example')
    ref = os.path.join(work, 'example.ref.csv')
    tool.run('open', sealed, '--keystore', ks, '--out', ref)
    check(read(ref) == read(fixture + '.csv'), 'enclave-data open of the example gives back interop_example.csv')
    out = os.path.join(work, 'example.py.csv')
    rc = py_decode(sealed, ks, fixture + '.passphrase', out)
    check(rc == 0 and read(out) == read(fixture + '.csv'), 'Python decoder gives back interop_example.csv')
    listing = json.loads(tool.run('keystore', 'list', '--keystore', ks, '--json').stdout)
    check([k['dataset_id'] for k in listing['data_keys']] == ['example:credit-mini'],
          'enclave-data keystore list shows the example data key')


# ------------------------------------------------------------------------------- docs

def doc_tables(path, marker):
    """Rows (lists of cells) of the markdown table right after <!-- interop:MARKER -->."""
    lines = read(path).decode().splitlines()
    try:
        i = lines.index('<!-- interop:%s -->' % marker)
    except ValueError:
        check(False, '%s has the marker interop:%s' % (os.path.basename(path), marker))
        return []
    i += 1
    while i < len(lines) and not lines[i].startswith('|'):
        i += 1
    rows = []
    while i < len(lines) and lines[i].startswith('|'):
        cells = [c.strip() for c in lines[i].strip().strip('|').split('|')]
        if not all(set(c) <= set('-: ') for c in cells):
            rows.append(cells)
        i += 1
    return rows[1:]  # without the heading row


def doc_block(path, marker):
    """The fenced block right after <!-- interop:MARKER -->."""
    text = read(path).decode()
    m = re.search(r'<!-- interop:%s -->\s*```[a-z]*\n(.*?)```' % re.escape(marker), text, re.S)
    if not m:
        check(False, '%s has a fenced block after interop:%s' % (os.path.basename(path), marker))
        return ''
    return m.group(1)


def cmd_docs(a, work):
    fixture = os.path.join(a.fixtures, 'interop_example')
    data = read(fixture + '.sealed')
    passphrase = dec.read_passphrase_bytes(read(fixture + '.passphrase'))
    ks = dec.Keystore(fixture + '.keystore.json', passphrase)
    values = dec.example_values(data, ks)
    h = dec.parse_header(data)
    ds_doc = os.path.join(a.docs, 'formats', 'sealed-dataset.md')
    ks_doc = os.path.join(a.docs, 'formats', 'keystore.md')

    # 1. The annotated header dump: offsets contiguous, bytes == the fixture's header.
    rows = doc_tables(ds_doc, 'example-header')
    got, expect_off = b'', 0
    for cells in rows:
        off = int(cells[0], 16)
        b = bytes.fromhex(cells[1].strip('`').replace(' ', ''))
        if off != expect_off:
            check(False, 'header dump row at 0x%04x follows 0x%04x' % (off, expect_off))
        got += b
        expect_off = off + len(b)
    check(len(rows) > 0 and got == h['bytes'],
          'sealed-dataset.md: annotated header dump == the fixture header (%d bytes)' % len(got))

    # 2. The derived values quoted in both documents.
    for doc, marker in ((ds_doc, 'example-values'), (ks_doc, 'example-values')):
        rows = doc_tables(doc, marker)
        check(len(rows) > 0, '%s: has example values' % os.path.basename(doc))
        for cells in rows:
            name, value = cells[0], cells[1].strip('`')
            if name == 'passphrase':
                check(value.encode() == passphrase, '%s: passphrase matches the fixture' % os.path.basename(doc))
            elif name in values:
                check(values[name] == value, '%s: %s matches the fixture' % (os.path.basename(doc), name))
            else:
                check(False, '%s: unknown example value %s' % (os.path.basename(doc), name))

    # 3. The keystore JSON and the example CSV shown in the documents.
    block = doc_block(ks_doc, 'example-keystore')
    check(block and json.loads(block) == json.loads(read(fixture + '.keystore.json')),
          'keystore.md: the example keystore JSON == the fixture')
    block = doc_block(ds_doc, 'example-csv')
    check(block.encode() == read(fixture + '.csv'), 'sealed-dataset.md: the example CSV == the fixture')
    check(values['commitment'] == h['commitment'].hex(), 'commitment recomputed from the DEK == header commitment')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('test', choices=['samples', 'tamper', 'fixture', 'docs'])
    ap.add_argument('--enclave-data')
    ap.add_argument('--samples', help='data/samples')
    ap.add_argument('--fixtures', help='tests/data/dataset')
    ap.add_argument('--docs', help='docs/')
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix='enclave-interop-') as work:
        try:
            globals()['cmd_' + a.test](a, work)
        except (RuntimeError, dec.DecodeError) as e:
            check(False, 'unexpected error: %s' % e)
    if failures:
        print('\n%d check(s) failed' % len(failures))
        return 1
    print('\nall checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
