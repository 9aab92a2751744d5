#!/usr/bin/python3
"""Interop tests between `enclave-data` (C++) and the independent Python decoder
(enclave_decode.py, written from docs/formats/*.md). Registered with CTest by
tests/interop/CMakeLists.txt; each subcommand is one test:

  samples  keystore init, seal both sample CSVs with both suites, decode with Python,
           compare with `enclave-data open` byte for byte (and inspect --json field by field)
  tamper   one flipped byte anywhere in a header, in ciphertext and in tags; truncation,
           extension, chunk swap, wrong passphrase: the Python decoder rejects each, with the
           same exit code as `enclave-data verify`
  fixture  the worked example under tests/data/dataset/ reads with both implementations;
           re-sealed with another header suite than its keystore entry, or with an empty
           class name, both refuse it alike (4, 3); passphrase files with a CR before the LF,
           with 1024 bytes, with text after the LF: the same exit code from both; a CSV
           whose names are not UTF-8: the same CSV and the same inspect --json from both
  docs     every value quoted in the documents' worked examples matches the fixture
  v2       schema v2 (missing values, categorical columns, regression): sealed by
           enclave-data, decoded byte for byte; changed records and schemas under the
           file's own key: the same exit code from both
  model    exported models (docs/formats/model-export.md): export key and public key file,
           seal-to with enclave-data and open in Python and vice versa, byte for byte;
           header bit flips, chunk flips, truncation, extension, swapped recipient blocks,
           another keystore, a wrong passphrase: the same exit code from both

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

    # The example re-sealed with suite 2 under its own DEK (a correct header tag and key
    # commitment), while its keystore entry says suite 1: both readers refuse it with 4
    # (keystore.md, "Finding the data key of a sealed file", step 3).
    other = os.path.join(work, 'example.suite2.sealed')
    passphrase = dec.read_passphrase_bytes(read(fixture + '.passphrase'))
    write(other, reseal(read(sealed), passphrase, ks, suite=2))
    p = py_decode(other, ks, fixture + '.passphrase', os.path.join(work, 'example.suite2.csv'))
    c = tool.run('verify', other, '--keystore', ks, expect=None).returncode
    check(p == c == dec.EXIT_AUTH_FAILED,
          'suite in the header differs from the keystore entry: exit 4 in both (python %d, C++ %d)' % (p, c))
    # An authenticated schema with an empty class name (class 0 "no" -> ""): invalid input (3)
    # in both (sealed-dataset.md: class names are 1..1024 bytes).
    meta = dec.inspect(read(sealed))['metadata']
    assert meta.endswith(b'\x02\x00no\x03\x00yes')
    empty = os.path.join(work, 'example.empty-class.sealed')
    write(empty, reseal(read(sealed), passphrase, ks, metadata=meta[:-9] + b'\x00\x00\x03\x00yes'))
    p = py_decode(empty, ks, fixture + '.passphrase', os.path.join(work, 'example.empty-class.csv'))
    c = tool.run('verify', empty, '--keystore', ks, expect=None).returncode
    check(p == c == dec.EXIT_INVALID_INPUT, 'an empty class name: exit 3 in both (python %d, C++ %d)' % (p, c))

    # Passphrases (keystore.md): the bytes before the first LF, a CR kept, 1..1023 bytes.
    for name, content, expect in [('cr', passphrase + b'\r\n', dec.EXIT_PERMISSION_DENIED),
                                  ('long', b'p' * 1024 + b'\n', dec.EXIT_INVALID_INPUT),
                                  ('lf', passphrase + b'\nignored', 0)]:
        passfile = os.path.join(work, 'pass.' + name)
        write(passfile, content)
        p = py_decode(sealed, ks, passfile, os.path.join(work, 'example.%s.csv' % name))
        c = Tool(a.enclave_data, passfile).run('verify', sealed, '--keystore', ks, expect=None).returncode
        check(p == c == expect, 'passphrase file %r...: exit %d in both (python %d, C++ %d)'
              % (content[-12:], expect, p, c))

    # Names that are not UTF-8: the same CSV from both decoders, byte for byte, and the same
    # inspect JSON (each ill-formed sequence shown as U+FFFD).
    passfile = os.path.join(work, 'pass')
    write(passfile, PASSPHRASE + b'\n')
    own = Tool(a.enclave_data, passfile)
    own_ks = make_keystore(own, work)
    csv = os.path.join(work, 'names.csv')
    write(csv, b'f\xff,g\xe2\x82,y\n1,2,x\xfe\n3,4,z\xc3\xa9\n5,6,x\xfe\n')
    names = os.path.join(work, 'names.sealed')
    own.run('seal', '--csv', csv, '--label', 'y', '--suite', 'aes-256-gcm', '--dataset-id', 'names',
            '--keystore', own_ks, '--out', names)
    compare_inspect(own, names, 'non-UTF-8 names')
    ref, out = os.path.join(work, 'names.ref.csv'), os.path.join(work, 'names.py.csv')
    own.run('open', names, '--keystore', own_ks, '--out', ref)
    rc = py_decode(names, own_ks, passfile, out)
    check(rc == 0 and read(out) == read(ref) == read(csv),
          'non-UTF-8 names: both decoders give back the CSV byte for byte')


def reseal(data, passphrase, keystore_path, suite=None, metadata=None, plain=None):
    """The sealed file `data` with another header suite, metadata and/or payload of the
    same length, rebuilt and re-encrypted under its own DEK: a correct key commitment,
    header tag and chunks."""
    import hashlib
    import hmac
    import struct
    h = dec.inspect(data)
    ks = dec.Keystore(keystore_path, passphrase)
    dek = ks.data_key(h['object_id'], h['key_id'])
    if plain is None:
        plain = b''.join(dec.open_chunks(data, h, dec.authenticate_header(h, dek)['payload_key']))
    assert len(plain) == h['payload_length']
    suite = h['suite'] if suite is None else suite
    meta = h['metadata'] if metadata is None else metadata
    oid = h['object_id'].encode('latin-1')
    body = (dec.MAGIC + struct.pack('<HHHHI', 1, suite, h['content_type'], 0, 174 + len(oid) + len(meta)) +
            h['keystore_id'] + h['key_id'] + h['salt'] +
            struct.pack('<IQQH', h['chunk_size'], h['payload_length'], h['chunk_count'], len(oid)) + oid +
            struct.pack('<I', len(meta)) + meta)
    k = dec.derive_subkeys(dek, h['salt'])
    header = body + k['commitment']
    header += hmac.new(k['header_key'], header, hashlib.sha256).digest()
    digest = hashlib.sha256(header).digest()
    aead = dec.make_aead(suite, k['payload_key'])
    n, size = h['chunk_count'], h['chunk_size']
    return header + b''.join(aead.encrypt(dec.chunk_nonce(i, i + 1 == n), plain[i * size:(i + 1) * size], digest)
                             for i in range(n))


# ------------------------------------------------------------------------------- schema v2

V2_CSV = (b'age,colour,smoker,income,y\n'
          b'37.5,red,yes,2097152.25,a\n'       # a tie in the shortest form: 2097152.2
          b'NA,blue,,2097152.75,b\n'           # ... and 2097152.8
          b'-999,red,no,1.5,a\n'
          b'null,"green, light",YES,nan,b\n'
          b'41,Green,no,,a\n')


def v2_records(data, ks):
    """The plaintext records of a sealed file (u32 words) and its schema."""
    h = dec.inspect(data)
    dek = ks.data_key(h['object_id'], h['key_id'])
    plain = b''.join(dec.open_chunks(data, h, dec.authenticate_header(h, dek)['payload_key']))
    return list(__import__('struct').unpack('<%dI' % (len(plain) // 4), plain)), dec.decode_schema(h['metadata'])


def cmd_v2(a, work):
    """Schema v2 (sealed-dataset.md): files sealed by enclave-data with missing values,
    categorical columns and a regression label decode in Python to the CSV enclave-data
    opens, byte for byte, with the same inspect --json; records and schemas changed under
    the file's own key get the same exit code from both."""
    import struct
    passfile = os.path.join(work, 'pass')
    write(passfile, PASSPHRASE + b'\n')
    tool = Tool(a.enclave_data, passfile)
    ks_path = make_keystore(tool, work)
    csv = os.path.join(work, 'v2.csv')
    write(csv, V2_CSV)
    nd = os.path.join(work, 'nd.csv')  # with --no-default-missing, NA and null are categories
    write(nd, b'x,c,y\n1,NA,a\n2,null,b\n3,x,a\n')
    cc = os.path.join(a.samples, 'credit_card_applications.csv')
    cases = [
        ('missing-categorical', csv, ['--label', 'y', '--missing', '-999']),
        ('categorical-flag', csv, ['--label', 'y', '--categorical', 'age', '--chunk-records', '2']),
        ('no-default-missing', nd, ['--label', 'y', '--no-default-missing']),
        ('regression', cc, ['--label', 'income', '--task', 'regression', '--categorical', 'dependents']),
        ('regression-chacha', cc, ['--label', 'share', '--task', 'regression', '--suite', 'chacha20-poly1305',
                                   '--chunk-records', '100']),
    ]
    sealed = {}
    for name, src, extra in cases:
        path = os.path.join(work, name + '.sealed')
        args = ['seal', '--csv', src, '--dataset-id', 'v2:' + name, '--keystore', ks_path, '--out', path] + extra
        if '--suite' not in extra:
            args += ['--suite', 'aes-256-gcm']
        tool.run(*args)
        sealed[name] = path
        check(dec.decode_schema(dec.inspect(read(path))['metadata']).version == 2,
              '%s: sealed with a v2 schema' % name)
        ref, out = os.path.join(work, name + '.ref.csv'), os.path.join(work, name + '.py.csv')
        tool.run('open', path, '--keystore', ks_path, '--out', ref)
        rc = py_decode(path, ks_path, passfile, out)
        check(rc == 0 and read(out) == read(ref),
              '%s: Python CSV == enclave-data open CSV, byte for byte (%d bytes)' % (name, len(read(ref))))
        compare_inspect(tool, path, name)
    ref = read(os.path.join(work, 'missing-categorical.ref.csv'))
    check(ref == b'age,colour,smoker,income,y\n37.5,red,yes,2097152.2,a\n,blue,,2097152.8,b\n'
                 b',red,no,1.5,a\n,"green, light",yes,,b\n41,Green,no,,a\n',
          'missing cells come back empty, categories by name, ties to even (2097152.2, 2097152.8)')
    check(read(os.path.join(work, 'regression.ref.csv')) == read(cc),
          'the credit card sample with a regression label opens back to itself')

    # Records changed under the file's own key: authentic, but invalid (3 in both).
    ks = dec.Keystore(ks_path, PASSPHRASE)
    data = read(sealed['missing-categorical'])
    words, schema = v2_records(data, ks)
    width = len(schema.columns)
    names = [c.name for c in schema.columns if c.kind != dec.KIND_LABEL]
    age, colour, smoker = names.index('age'), names.index('colour'), names.index('smoker')
    mutations = [
        ('a NaN other than 0x7fc00000 where missing is allowed', age, 0x7FC00001),
        ('a negative quiet NaN where missing is allowed', age, 0xFFC00000),
        ('missing in a column that does not allow it', colour, 0x7FC00000),
        ('a category index out of range', colour, struct.unpack('<I', struct.pack('<f', 4.0))[0]),
        ('a fractional category index', colour, struct.unpack('<I', struct.pack('<f', 0.5))[0]),
        ('yes/no 2 where missing is allowed', smoker, struct.unpack('<I', struct.pack('<f', 2.0))[0]),
        ('a missing label', width - 1, 0x7FC00000),
    ]
    for what, col, bits in mutations:
        w = list(words)
        w[width + col] = bits  # in the second record
        bad = os.path.join(work, 'bad.sealed')
        write(bad, reseal(data, PASSPHRASE, ks_path, plain=struct.pack('<%dI' % len(w), *w)))
        p = py_decode(bad, ks_path, passfile, os.path.join(work, 'bad.csv'))
        c = tool.run('verify', bad, '--keystore', ks_path, expect=None).returncode
        o = tool.run('open', bad, '--keystore', ks_path, '--out', os.path.join(work, 'bad.ref.csv'),
                     expect=None).returncode
        check(p == c == o == dec.EXIT_INVALID_INPUT and not os.path.exists(os.path.join(work, 'bad.ref.csv')),
              '%s: exit 3 from Python, verify and open (python %d, verify %d, open %d)' % (what, p, c, o))
    data = read(sealed['regression'])
    words, schema = v2_records(data, ks)
    for what, bits in (('an infinite regression label', 0x7F800000), ('a NaN regression label', 0x7FC00000)):
        w = list(words)
        w[len(schema.columns) - 1] = bits
        bad = os.path.join(work, 'bad-reg.sealed')
        write(bad, reseal(data, PASSPHRASE, ks_path, plain=struct.pack('<%dI' % len(w), *w)))
        p = py_decode(bad, ks_path, passfile, os.path.join(work, 'bad-reg.csv'))
        c = tool.run('verify', bad, '--keystore', ks_path, expect=None).returncode
        check(p == c == dec.EXIT_INVALID_INPUT, '%s: exit 3 in both (python %d, C++ %d)' % (what, p, c))

    # Schemas changed under the file's own key.
    data = read(sealed['missing-categorical'])
    _, schema = v2_records(data, ks)
    meta = dec.inspect(data)['metadata']
    fields = {name: (off, b) for off, name, b in reversed(dec.decode_schema(meta).fields)}  # first of each

    def patched(off, b):
        return meta[:off] + b + meta[off + len(b):]

    off_flags = fields['flags'][0]
    schema_cases = [
        ('schema version 3', patched(4, b'\x03\x00'), dec.EXIT_UNSUPPORTED),
        ('task 2', patched(6, b'\x02'), dec.EXIT_UNSUPPORTED),
        ('an unknown column flag bit', patched(off_flags, b'\x03'), dec.EXIT_UNSUPPORTED),
        ('an unknown column kind', patched(off_flags - 1, b'\x07'), dec.EXIT_UNSUPPORTED),
        ('the magic broken: read as v1', patched(0, b'ESCX'), dec.EXIT_INVALID_INPUT),
    ]
    cat_off, cat = fields['category']
    if len(cat) >= 2:
        schema_cases.append(('categories out of byte order', patched(cat_off, b'\xff' + cat[1:]),
                             dec.EXIT_INVALID_INPUT))
    for what, m, want in schema_cases:
        bad = os.path.join(work, 'bad-schema.sealed')
        write(bad, reseal(data, PASSPHRASE, ks_path, metadata=m))
        p = py_decode(bad, ks_path, passfile, os.path.join(work, 'bad-schema.csv'))
        c = tool.run('verify', bad, '--keystore', ks_path, expect=None).returncode
        check(p == c == want, '%s: exit %d in both (python %d, C++ %d)' % (what, want, p, c))
    # A v2 schema that needs nothing of v2: 3 in both (its one encoding is v1).
    v2_plain = (b'ESCH' + struct.pack('<HBI', 2, 0, width) +
                b''.join(struct.pack('<BBH', dec.KIND_LABEL if c.kind == dec.KIND_LABEL else 0, 0,
                                     len(c.name.encode())) + c.name.encode() for c in schema.columns) +
                struct.pack('<I', 2) + b'\x01\x00a\x01\x00b')
    bad = os.path.join(work, 'bad-plain-v2.sealed')
    write(bad, reseal(data, PASSPHRASE, ks_path, metadata=v2_plain))
    p = py_decode(bad, ks_path, passfile, os.path.join(work, 'bad-plain-v2.csv'))
    c = tool.run('verify', bad, '--keystore', ks_path, expect=None).returncode
    check(p == c == dec.EXIT_INVALID_INPUT, 'a v2 schema without a v2 feature: exit 3 in both (python %d, C++ %d)'
          % (p, c))


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

    # 4. The schema v2 example: the hex decodes to the schema the text describes.
    hexed = []
    for line in doc_block(ds_doc, 'schema-v2-example').splitlines():
        for tok in line.split():
            if not re.fullmatch(r'[0-9a-f]{2}', tok):
                break
            hexed.append(tok)
    example = bytes.fromhex(''.join(hexed))
    try:
        sv2 = dec.decode_schema(example)
        got = (len(example), sv2.version, sv2.task, [(c.name, c.kind, c.missing, c.categories) for c in sv2.columns],
               sv2.classes)
    except dec.DecodeError as e:
        got = str(e)
    check(got == (61, 2, 0, [('age', 0, True, []), ('colour', 3, False, ['blue', 'red']), ('y', 2, False, [])],
                  ['no', 'yes']), 'sealed-dataset.md: the schema v2 example decodes as described (%s)' % (got,))


# ------------------------------------------------------------------------------- model

MODEL_INSPECT_FIELDS = ['content', 'format_version', 'model_id', 'suite', 'keystore_id', 'key_id',
                        'recipient_public_key', 'model_format', 'job_digest', 'created', 'created_unix',
                        'chunk_bytes', 'chunks', 'payload_bytes', 'file_bytes', 'sha256']


def cmd_model(a, work):
    passfile = os.path.join(work, 'pass')
    write(passfile, PASSPHRASE + b'\n')
    tool = Tool(a.enclave_data, passfile)
    ks_path = make_keystore(tool, work)
    tool.run('keystore', 'export-key', 'create', '--keystore', ks_path, '--id', 'tenant-export')
    pub_path = os.path.join(work, 'tenant-export.pub')
    shown = json.loads(tool.run('keystore', 'export-key', 'show', '--keystore', ks_path, '--out', pub_path,
                                '--json').stdout)
    pub = dec.parse_public_key(read(pub_path))
    ks = dec.Keystore(ks_path, PASSPHRASE)
    check(pub['public_key'].hex() == shown['public_key'] and pub['key_id'].hex() == shown['key_id'] and
          dec.fingerprint(pub['keystore_id'], pub['key_id'], pub['public_key']).hex() == shown['fingerprint'],
          'public key file: Python reads what export-key show printed (key, id, fingerprint)')
    check(len(ks.export_keys) == 1 and ks.export_private_key(pub['key_id'])[1] == pub['public_key'],
          'Python unwraps the export private key and it matches the public key file')

    def py_open_code(data, keystore=ks):
        try:
            dec.open_model(data, keystore)
            return 0
        except dec.DecodeError as e:
            return e.code

    def cxx_open(path, out, keystore=ks_path, passphrase=None):
        t = Tool(a.enclave_data, passphrase) if passphrase else tool
        if os.path.exists(out):
            os.unlink(out)
        return t.run('open-model', '--keystore', keystore, '--in', path, '--out', out, expect=None).returncode

    if a.docs:
        block = doc_block(os.path.join(a.docs, 'formats', 'model-export.md'), 'example-public-key')
        try:
            ex = dec.parse_public_key(block.encode())
            check(ex['name'] == 'export', 'model-export.md: the example public key file parses, fingerprint matches')
        except dec.DecodeError as e:
            check(False, 'model-export.md: the example public key file parses: %s' % e)

        rows = dict((c[0], c[1].strip('`')) for c in doc_tables(os.path.join(a.docs, 'formats', 'model-export.md'),
                                                                'wrap-vector'))
        v = {k: bytes.fromhex(rows.get(k, '')) for k in ('recipient_private_key', 'keystore_id', 'key_id',
                                                           'ephemeral_private_key', 'dek')}
        big_r, big_e = dec.x25519_base(v['recipient_private_key']), dec.x25519_base(v['ephemeral_private_key'])
        shared = dec.x25519(v['ephemeral_private_key'], big_r)
        wk = dec.wrap_key_for(shared, big_e, big_r)
        aad = dec.wrap_aad(v['keystore_id'], v['key_id'])
        want = {'recipient_public_key': big_r, 'ephemeral_public_key': big_e, 'shared_secret': shared,
                'fingerprint': dec.fingerprint(v['keystore_id'], v['key_id'], big_r), 'wrap_key': wk,
                'wrap_aad': aad, 'wrapped_dek': dec.ChaCha20Poly1305(wk).encrypt(bytes(12), v['dek'], aad)}
        check(dec.x25519(v['recipient_private_key'], big_e) == shared, 'wrap vector: both sides agree on the secret')
        for k, value in want.items():
            check(rows.get(k) == value.hex(), 'model-export.md wrap vector: %s recomputed' % k)

    # 1. enclave-data seals, both open, byte for byte.
    cases = [(0, 'aes-256-gcm', None), (1, 'chacha20-poly1305', None), (1000, 'aes-256-gcm', '64'),
             (70000, 'chacha20-poly1305', '4096'), (3 * (1 << 20) + 5, 'aes-256-gcm', None)]
    for n, suite, chunk in cases:
        name = 'm%d-%s' % (n, suite)
        model = os.urandom(n)
        src = os.path.join(work, name + '.bin')
        write(src, model)
        sealed = os.path.join(work, name + '.sealed')
        args = ['seal-to', '--pub', pub_path, '--in', src, '--out', sealed, '--format-id', 'interop/v1',
                '--suite', suite, '--model-id', 'interop:' + name, '--job-digest', hashlib_hex(name)]
        if chunk:
            args += ['--chunk-bytes', chunk]
        tool.run(*args, passphrase=False)
        ref = os.path.join(work, name + '.ref')
        check(cxx_open(sealed, ref) == 0 and read(ref) == model, '%s: enclave-data open-model gives the model back' % name)
        try:
            got, h, m = dec.open_model(read(sealed), ks)
            check(got == model, '%s: Python opens it, byte for byte (%d bytes)' % (name, n))
        except dec.DecodeError as e:
            check(False, '%s: Python opens it: %s' % (name, e))
            continue
        c = json.loads(tool.run('inspect', '--json', sealed, passphrase=False).stdout)
        p = dec.model_json(h, m, read(sealed))
        for k in MODEL_INSPECT_FIELDS:
            check(c.get(k) == p.get(k), '%s: inspect field %s agrees (%s)' % (name, k, json.dumps(p.get(k))[:50]))

    # 2. Python seals, enclave-data opens.
    for suite, chunk in ((1, 1 << 20), (2, 333)):
        model = os.urandom(10000)
        sealed = os.path.join(work, 'py-%d.sealed' % suite)
        write(sealed, dec.seal_model(pub, model, 'python/v1', suite, chunk, 'py.model', bytes(range(32))))
        out = os.path.join(work, 'py-%d.bin' % suite)
        check(cxx_open(sealed, out) == 0 and read(out) == model,
              'a model sealed by the Python implementation (suite %d) opens with enclave-data' % suite)
        check(tool.run('verify', sealed, '--keystore', ks_path, expect=None).returncode == 0,
              'enclave-data verify accepts the Python-sealed model (suite %d)' % suite)

    # 3. Tampering: both reject with the same exit code, and open-model leaves no output.
    model = os.urandom(100)
    good = dec.seal_model(pub, model, 'tamper/v1', 1, 32, 'tamper')
    other = dec.seal_model(pub, model, 'tamper/v1', 1, 32, 'tamper')
    h = dec.parse_header(good)
    meta_at = 110 + len(h['object_id'])
    mutations = []
    for off in range(h['header_length']):
        for bit in (0x01, 0x80):
            d = bytearray(good)
            d[off] ^= bit
            mutations.append(('header byte %d ^0x%02x' % (off, bit), bytes(d)))
    for i in range(h['chunk_count']):
        for at in (0, dec.chunk_plain_size(h, i)):  # first ciphertext byte, first tag byte
            d = bytearray(good)
            d[dec.chunk_offset(h, i) + at] ^= 0x01
            mutations.append(('chunk %d byte %d' % (i, at), bytes(d)))
    mutations += [('truncated by one byte', good[:-1]), ('truncated to the header', good[:h['header_length']]),
                  ('truncated inside the header', good[:100]), ('one byte appended', good + b'\x00')]
    for lo, hi, what in ((meta_at + 2, meta_at + 116, 'whole recipient block'),
                         (meta_at + 36, meta_at + 116, 'ephemeral key and wrapped DEK'),
                         (meta_at + 68, meta_at + 116, 'wrapped DEK')):
        mutations.append(('%s from another file' % what, good[:lo] + other[lo:hi] + good[hi:]))
    out = os.path.join(work, 'tampered.bin')
    disagreements = rejected = left_output = 0
    for i, (what, data) in enumerate(mutations):
        path = os.path.join(work, 'tampered.sealed')
        write(path, data)
        p, c = py_open_code(data), cxx_open(path, out)
        rejected += p != 0
        left_output += os.path.exists(out)
        if p == 0:
            check(False, 'Python decoder rejects: %s' % what)
        if p != c:
            disagreements += 1
            check(False, '%s: Python exit %d, enclave-data open-model exit %d' % (what, p, c))
    check(rejected == len(mutations), 'Python decoder rejects all %d model mutations' % len(mutations))
    check(disagreements == 0, 'Python decoder and enclave-data open-model give the same exit code for all of them')
    check(left_output == 0, 'enclave-data open-model left no output for any of them')
    untouched = os.path.join(work, 'untouched.sealed')
    write(untouched, good)
    check(py_open_code(good) == 0 and cxx_open(untouched, out) == 0 and read(out) == model,
          'the untouched tamper fixture opens in both')

    # 4. Another tenant's keystore (with an export key of the same name); a wrong passphrase.
    other_dir = os.path.join(work, 'other')
    os.mkdir(other_dir)
    other_ks = make_keystore(tool, other_dir)
    tool.run('keystore', 'export-key', 'create', '--keystore', other_ks, '--id', 'tenant-export')
    p = py_open_code(good, dec.Keystore(other_ks, PASSPHRASE))
    c = cxx_open(untouched, out, keystore=other_ks)
    check(p == c == dec.EXIT_NOT_FOUND, 'another keystore: exit 6 in both (python %d, C++ %d)' % (p, c))
    wrong = os.path.join(work, 'wrong-pass')
    write(wrong, b'not the passphrase at all\n')
    try:
        dec.Keystore(ks_path, b'not the passphrase at all')
        p = 0
    except dec.DecodeError as e:
        p = e.code
    c = cxx_open(untouched, out, passphrase=wrong)
    check(p == c == dec.EXIT_PERMISSION_DENIED, 'wrong passphrase: exit 5 in both (python %d, C++ %d)' % (p, c))

    # 5. A damaged public key file: refused by both with exit 3.
    doc = json.loads(read(pub_path))
    doc['public_key'] = doc['public_key'][:-2] + ('00' if doc['public_key'][-2:] != '00' else '01')
    bad_pub = os.path.join(work, 'bad.pub')
    write(bad_pub, json.dumps(doc).encode())
    try:
        dec.parse_public_key(read(bad_pub))
        p = 0
    except dec.DecodeError as e:
        p = e.code
    c = tool.run('seal-to', '--pub', bad_pub, '--in', os.path.join(work, 'm1-chacha20-poly1305.bin'), '--out',
                 os.path.join(work, 'bad.sealed'), '--format-id', 'x', passphrase=False, expect=None).returncode
    check(p == c == dec.EXIT_INVALID_INPUT and not os.path.exists(os.path.join(work, 'bad.sealed')),
          'public key file with a mismatched fingerprint: exit 3 in both (python %d, C++ %d)' % (p, c))


def hashlib_hex(text):
    return __import__('hashlib').sha256(text.encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('test', choices=['samples', 'tamper', 'fixture', 'docs', 'model', 'v2'])
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
