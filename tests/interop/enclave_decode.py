#!/usr/bin/python3
"""An independent decoder for enclave sealed datasets, exported models and tenant keystores.

Written from docs/formats/sealed-dataset.md, docs/formats/model-export.md and
docs/formats/keystore.md alone (it shares no code with the C++ implementation), so that the
documents are proven complete: the interop test (tests/interop/CMakeLists.txt) seals files
with `enclave-data`, decodes them here and compares the CSV (or model bytes) with
`enclave-data open` (`open-model`) byte for byte, and seals models here for `enclave-data`.

Run it with Debian's /usr/bin/python3: it needs `cryptography` and `nacl` (PyNaCl).

  enclave_decode.py decode SEALED --keystore K --passphrase-fd N --out OUT.csv
  enclave_decode.py inspect SEALED                 (header and schema/model facts as JSON; no key)
  enclave_decode.py explain SEALED --keystore K --passphrase-fd N
                                                   (markdown tables for the worked example)
  enclave_decode.py open-model SEALED --keystore K --passphrase-fd N --out MODEL
  enclave_decode.py seal-to MODEL --pub F.pub --out SEALED --format-id ID [--suite S]
                                  [--chunk-bytes N] [--model-id ID] [--job-digest HEX]

Exit codes follow docs/exit-codes.md: 3 invalid input, 4 authentication failed,
5 wrong passphrase, 6 not found, 9 unsupported.
"""

import argparse
import hashlib
import hmac
import json
import os
import struct
import sys
from fractions import Fraction

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
import nacl.bindings
import nacl.exceptions
import nacl.pwhash

EXIT_INVALID_INPUT = 3
EXIT_AUTH_FAILED = 4
EXIT_PERMISSION_DENIED = 5
EXIT_NOT_FOUND = 6
EXIT_UNSUPPORTED = 9


class DecodeError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def invalid(msg):
    return DecodeError(EXIT_INVALID_INPUT, msg)


def auth_failed(msg):
    return DecodeError(EXIT_AUTH_FAILED, msg)


# ---------------------------------------------------------------- keystore (keystore.md)

KEYSTORE_MAX_BYTES = 64 << 20
KDF_OPSLIMIT_RANGE = (1, 64)
KDF_MEMLIMIT_RANGE = (8192, 4 << 30)
SUITE_NAMES = {'aes-256-gcm': 1, 'chacha20-poly1305': 2}
SUITE_BY_ID = {v: k for k, v in SUITE_NAMES.items()}
HEX_DIGITS = frozenset('0123456789abcdefABCDEF')


def _hex_field(obj, name, size):
    v = obj.get(name)
    if not isinstance(v, str) or len(v) != 2 * size or any(c not in HEX_DIGITS for c in v):
        raise invalid("field '%s' must be %d bytes of hex" % (name, size))
    return bytes.fromhex(v)


def _uint_field(obj, name):
    v = obj.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise invalid("missing unsigned field '%s'" % name)
    return v


def _str_field(obj, name):
    v = obj.get(name)
    if not isinstance(v, str):
        raise invalid("missing string field '%s'" % name)
    return v


def _obj_field(obj, name):
    v = obj.get(name)
    if not isinstance(v, dict):
        raise invalid("missing object '%s'" % name)
    return v


def kek_aad(keystore_id, opslimit, memlimit, salt):
    return b'enclave keystore v1 kek' + keystore_id + struct.pack('<QQ', opslimit, memlimit) + salt


def dek_aad(keystore_id, key_id, suite_id, dataset_id):
    ds = dataset_id.encode()
    return b'enclave keystore v1 dek' + keystore_id + key_id + struct.pack('<HH', suite_id, len(ds)) + ds


def xchacha_open(key, nonce, ciphertext, aad):
    return nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(ciphertext, aad, nonce, key)


class Keystore:
    """An unlocked keystore: its id, the KEK, and the wrapped data-key entries."""

    def __init__(self, path, passphrase):
        with open(path, 'rb') as f:
            raw = f.read(KEYSTORE_MAX_BYTES + 1)
        if len(raw) > KEYSTORE_MAX_BYTES:
            raise invalid('%s: keystore larger than 64 MiB' % path)
        try:
            doc = json.loads(raw)
        except ValueError:
            raise invalid('%s: not a JSON keystore' % path) from None
        if not isinstance(doc, dict) or doc.get('format') != 'enclave-keystore':
            raise invalid('%s: not an enclave keystore' % path)
        version = _uint_field(doc, 'version')
        if version != 1:
            raise DecodeError(EXIT_UNSUPPORTED, 'keystore version %d is not supported' % version)
        self.id = _hex_field(doc, 'keystore_id', 16)
        kdf = _obj_field(doc, 'kdf')
        if _str_field(kdf, 'algorithm') != 'argon2id13':
            raise DecodeError(EXIT_UNSUPPORTED, 'unknown KDF')
        self.opslimit = _uint_field(kdf, 'opslimit')
        self.memlimit = _uint_field(kdf, 'memlimit_bytes')
        if not (KDF_OPSLIMIT_RANGE[0] <= self.opslimit <= KDF_OPSLIMIT_RANGE[1] and
                KDF_MEMLIMIT_RANGE[0] <= self.memlimit <= KDF_MEMLIMIT_RANGE[1]):
            raise invalid('KDF parameters out of range')
        self.kdf_salt = _hex_field(kdf, 'salt', 16)
        kek = _obj_field(doc, 'kek')
        if _str_field(kek, 'algorithm') != 'xchacha20-poly1305':
            raise DecodeError(EXIT_UNSUPPORTED, 'unknown key wrapping')
        kek_nonce = _hex_field(kek, 'nonce', 24)
        kek_wrapped = _hex_field(kek, 'wrapped', 48)
        entries = doc.get('data_keys')
        if not isinstance(entries, list):
            raise invalid("missing array 'data_keys'")
        self.entries = []
        for i, e in enumerate(entries):
            try:
                if not isinstance(e, dict):
                    raise invalid('not an object')
                dataset_id = _str_field(e, 'dataset_id')
                validate_object_id(dataset_id)
                suite = _str_field(e, 'suite')
                if suite not in SUITE_NAMES:
                    raise invalid("unknown cipher suite '%s'" % suite)
                self.entries.append({
                    'dataset_id': dataset_id,
                    'key_id': _hex_field(e, 'key_id', 16),
                    'suite': suite,
                    'created': _str_field(e, 'created'),
                    'nonce': _hex_field(e, 'nonce', 24),
                    'wrapped': _hex_field(e, 'wrapped', 48),
                })
            except DecodeError as err:
                raise DecodeError(err.code, 'data_keys[%d]: %s' % (i, err)) from None
        # Optional member (keystore.md, "Export keys"); absent in older keystores.
        self.export_keys = []
        exports = doc.get('export_keys', [])
        if not isinstance(exports, list):
            raise invalid("'export_keys' must be an array")
        for i, e in enumerate(exports):
            try:
                if not isinstance(e, dict):
                    raise invalid('not an object')
                name = _str_field(e, 'name')
                validate_object_id(name)
                if _str_field(e, 'algorithm') != 'x25519':
                    raise DecodeError(EXIT_UNSUPPORTED, 'unknown export key algorithm')
                entry = {'name': name, 'key_id': _hex_field(e, 'key_id', 16),
                         'public_key': _hex_field(e, 'public_key', 32), 'created': _str_field(e, 'created'),
                         'nonce': _hex_field(e, 'nonce', 24), 'wrapped': _hex_field(e, 'wrapped', 48)}
                if any(x['name'] == name or x['key_id'] == entry['key_id'] for x in self.export_keys):
                    raise invalid('export key name or key id used twice')
                self.export_keys.append(entry)
            except DecodeError as err:
                raise DecodeError(err.code, 'export_keys[%d]: %s' % (i, err)) from None
        # Argon2id (crypto_pwhash ARGON2ID13), 32 bytes out.
        self.passphrase_key = nacl.pwhash.argon2id.kdf(32, passphrase, self.kdf_salt,
                                                       opslimit=self.opslimit, memlimit=self.memlimit)
        try:
            self.kek = xchacha_open(self.passphrase_key, kek_nonce, kek_wrapped,
                                    kek_aad(self.id, self.opslimit, self.memlimit, self.kdf_salt))
        except nacl.exceptions.CryptoError:
            raise DecodeError(EXIT_PERMISSION_DENIED, 'wrong passphrase (or KDF/KEK fields altered)') from None

    def data_key(self, dataset_id, key_id):
        for e in self.entries:
            if e['dataset_id'] != dataset_id or e['key_id'] != key_id:
                continue
            try:
                return xchacha_open(self.kek, e['nonce'], e['wrapped'],
                                    dek_aad(self.id, key_id, SUITE_NAMES[e['suite']], dataset_id))
            except nacl.exceptions.CryptoError:
                raise auth_failed("data key of '%s' failed to unwrap" % dataset_id) from None
        raise DecodeError(EXIT_NOT_FOUND, "no data key for dataset '%s' with key id %s" % (dataset_id, key_id.hex()))

    def data_key_suite(self, dataset_id, key_id):
        """The suite id the entry (dataset_id, key_id) was made for (bound into its DEK_AAD)."""
        for e in self.entries:
            if e['dataset_id'] == dataset_id and e['key_id'] == key_id:
                return SUITE_NAMES[e['suite']]
        raise DecodeError(EXIT_NOT_FOUND, "no data key for dataset '%s' with key id %s" % (dataset_id, key_id.hex()))

    def export_private_key(self, key_id):
        """(private, public) of export key `key_id`: unwrapped, and checked against each other."""
        for e in self.export_keys:
            if e['key_id'] != key_id:
                continue
            name = e['name'].encode()
            aad = (b'enclave keystore v1 export key' + self.id + key_id + e['public_key'] +
                   struct.pack('<H', len(name)) + name)
            try:
                private = xchacha_open(self.kek, e['nonce'], e['wrapped'], aad)
            except nacl.exceptions.CryptoError:
                raise auth_failed("export key '%s' failed to unwrap" % e['name']) from None
            if x25519_base(private) != e['public_key']:
                raise auth_failed("export key '%s': private half does not match its public key" % e['name'])
            return private, e['public_key']
        raise DecodeError(EXIT_NOT_FOUND, 'no export key with key id %s' % key_id.hex())


# ------------------------------------------------------------------ X25519 (RFC 7748)

def x25519_base(private):
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def x25519(private, public):
    """The shared secret; None when it is all zero (a low-order public key)."""
    try:
        shared = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        return None
    return None if shared == bytes(32) else shared


# ----------------------------------------------------------- sealed file (sealed-dataset.md)

MAGIC = b'ENCLSEAL'
FIXED_PREFIX = 20
MAX_HEADER = 17 << 20
MAX_METADATA = 16 << 20
MAX_CHUNK = 1 << 30
MAX_OBJECT_ID = 128
MAX_PAYLOAD = 1 << 56
TAG = 16
OBJECT_ID_CHARS = frozenset(b'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:')
INFO_PAYLOAD = b'enclave sealed-file v1 payload key'
INFO_HEADER = b'enclave sealed-file v1 header key'
INFO_COMMITMENT = b'enclave sealed-file v1 key commitment'
CONTENT_TABULAR = 1
CONTENT_MODEL = 2


def validate_object_id(s):
    b = s.encode('utf-8', 'surrogatepass')
    if not 1 <= len(b) <= MAX_OBJECT_ID or any(c not in OBJECT_ID_CHARS for c in b):
        raise invalid('bad object id %r' % s)


def chunk_count_for(payload_length, chunk_size):
    if payload_length == 0:
        return 1
    return (payload_length + chunk_size - 1) // chunk_size


class Reader:
    """Bounds-checked little-endian reader that records each field's offset and bytes."""

    def __init__(self, data):
        self.data, self.pos, self.fields = data, 0, []

    def take(self, name, n):
        if n > len(self.data) - self.pos:
            raise invalid("header field '%s' at offset %d needs %d bytes" % (name, self.pos, n))
        b = self.data[self.pos:self.pos + n]
        self.fields.append((self.pos, name, b))
        self.pos += n
        return b

    def u8(self, name):
        return self.take(name, 1)[0]

    def u16(self, name):
        return struct.unpack('<H', self.take(name, 2))[0]

    def u32(self, name):
        return struct.unpack('<I', self.take(name, 4))[0]

    def u64(self, name):
        return struct.unpack('<Q', self.take(name, 8))[0]


def parse_header(data):
    """Steps 1-3 of the reader's checks: magic, version, structure. `data` may run past the
    header. Returns a dict with every field and the raw header bytes."""
    if len(data) < FIXED_PREFIX:
        raise invalid('too short to be a sealed file')
    if data[:8] != MAGIC:
        raise invalid('bad magic')
    version, = struct.unpack_from('<H', data, 8)
    if version != 1:
        raise DecodeError(EXIT_UNSUPPORTED, 'format version %d' % version)
    header_length, = struct.unpack_from('<I', data, 16)
    if header_length > MAX_HEADER:
        raise invalid('header length beyond 17 MiB')
    if len(data) < header_length:
        raise auth_failed('file ends inside the header: truncated')
    r = Reader(data[:header_length])
    h = {}
    h['magic'] = r.take('magic', 8)
    h['version'] = r.u16('version')
    h['suite'] = r.u16('suite')
    if h['suite'] not in SUITE_BY_ID:
        raise DecodeError(EXIT_UNSUPPORTED, 'unknown suite %d' % h['suite'])
    h['content_type'] = r.u16('content_type')
    if r.u16('reserved') != 0:
        raise invalid('reserved field not zero')
    h['header_length'] = r.u32('header_length')
    h['keystore_id'] = r.take('keystore_id', 16)
    h['key_id'] = r.take('key_id', 16)
    h['salt'] = r.take('salt', 32)
    h['chunk_size'] = r.u32('chunk_size')
    h['payload_length'] = r.u64('payload_length')
    h['chunk_count'] = r.u64('chunk_count')
    id_len = r.u16('object_id_length')
    h['object_id'] = r.take('object_id', id_len).decode('latin-1')
    meta_len = r.u32('metadata_length')
    if meta_len > MAX_METADATA:
        raise invalid('metadata beyond 16 MiB')
    h['metadata'] = r.take('metadata', meta_len)
    h['commitment'] = r.take('commitment', 32)
    h['tag'] = r.take('header_tag', 32)
    validate_object_id(h['object_id'])
    if not 1 <= h['chunk_size'] <= MAX_CHUNK:
        raise invalid('chunk size out of range')
    if h['content_type'] not in (CONTENT_TABULAR, CONTENT_MODEL):
        raise DecodeError(EXIT_UNSUPPORTED, 'unknown content type %d' % h['content_type'])
    if r.pos != header_length:
        raise invalid('header_length disagrees with the fields')
    if h['chunk_count'] != chunk_count_for(h['payload_length'], h['chunk_size']):
        raise invalid('chunk count does not match payload length')
    if h['payload_length'] > MAX_PAYLOAD:
        raise invalid('payload length beyond 2^56')
    h['bytes'] = data[:header_length]
    h['fields'] = r.fields
    h['header_digest'] = hashlib.sha256(h['bytes']).digest()
    return h


def file_size_for(h):
    return h['header_length'] + h['payload_length'] + TAG * h['chunk_count']


def chunk_plain_size(h, i):
    if i + 1 < h['chunk_count']:
        return h['chunk_size']
    return h['payload_length'] - (h['chunk_count'] - 1) * h['chunk_size']


def chunk_offset(h, i):
    return h['header_length'] + i * (h['chunk_size'] + TAG)


def chunk_nonce(i, last):
    return struct.pack('>Q', i) + b'\x00\x00\x00' + (b'\x01' if last else b'\x00')


def hkdf(dek, salt, info):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(dek)


def derive_subkeys(dek, salt):
    if len(dek) != 32:
        raise invalid('data key must be 32 bytes')
    return {'payload_key': hkdf(dek, salt, INFO_PAYLOAD),
            'header_key': hkdf(dek, salt, INFO_HEADER),
            'commitment': hkdf(dek, salt, INFO_COMMITMENT)}


def authenticate_header(h, dek):
    """Steps 5-6: key commitment, then header HMAC over every header byte before the tag."""
    k = derive_subkeys(dek, h['salt'])
    if not hmac.compare_digest(k['commitment'], h['commitment']):
        raise auth_failed('key commitment mismatch: not this file\'s key')
    tag = hmac.new(k['header_key'], h['bytes'][:-32], hashlib.sha256).digest()
    if not hmac.compare_digest(tag, h['tag']):
        raise auth_failed('header authentication failed')
    return k


def make_aead(suite, key):
    return AESGCM(key) if suite == 1 else ChaCha20Poly1305(key)


def open_chunks(data, h, payload_key):
    """Step 7: every chunk, in order, authenticated. Yields plaintext bytes."""
    aead = make_aead(h['suite'], payload_key)
    n = h['chunk_count']
    for i in range(n):
        off, size = chunk_offset(h, i), chunk_plain_size(h, i) + TAG
        try:
            yield aead.decrypt(chunk_nonce(i, i + 1 == n), data[off:off + size], h['header_digest'])
        except InvalidTag:
            raise auth_failed('chunk %d failed authentication' % i) from None


# ------------------------------------------------------------------------- tabular schema

KIND_NAMES = {0: 'numeric', 1: 'yes/no', 2: 'label', 3: 'categorical'}
KIND_NUMERIC, KIND_YES_NO, KIND_LABEL, KIND_CATEGORICAL = 0, 1, 2, 3
TASK_NAMES = {0: 'classification', 1: 'regression'}
SCHEMA_MAGIC = b'ESCH'
MISSING_BITS = 0x7FC00000
MAX_NAME = 1024


class Column:
    def __init__(self, name, kind, missing=False, categories=()):
        self.name, self.kind, self.missing, self.categories = name, kind, missing, list(categories)


class Schema:
    """version 1 or 2; task 0 classification, 1 regression; columns; classes; fields: the
    (offset, name, bytes) of every field read, for the worked examples."""

    def __init__(self, version, task, columns, classes, fields):
        self.version, self.task, self.columns, self.classes, self.fields = version, task, columns, classes, fields


def _name_ok(b):
    return 1 <= len(b) <= MAX_NAME


def _names(r, field, count):
    if count > (len(r.data) - r.pos) // 2:
        raise invalid('%s count exceeds the metadata' % field)
    return [r.take(field, r.u16(field + '_length')) for _ in range(count)]


def _text(b):
    return b.decode('utf-8', 'surrogateescape')


def _decode_v1(r):
    n = r.u32('column_count')
    if not 2 <= n <= (1 << 20) or n > (len(r.data) - 4) // 4:
        raise invalid('column count out of range')
    columns = []
    for _ in range(n):
        kind = r.u8('kind')
        if kind > 2:
            raise invalid('unknown column kind %d' % kind)
        columns.append(Column(r.take('name', r.u16('name_length')), kind))
    k = r.u32('class_count')
    if k > (1 << 16):
        raise invalid('class count out of range')
    return 0, columns, _names(r, 'class', k)


def _decode_v2(r):
    r.take('schema_magic', 4)
    version = r.u16('schema_version')
    if version != 2:
        raise DecodeError(EXIT_UNSUPPORTED, 'schema version %d' % version)
    task = r.u8('task')
    if task > 1:
        raise DecodeError(EXIT_UNSUPPORTED, 'unknown task %d' % task)
    n = r.u32('column_count')
    if not 2 <= n <= (1 << 20) or n > (len(r.data) - r.pos) // 5:
        raise invalid('column count out of range')
    columns = []
    for _ in range(n):
        kind = r.u8('kind')
        if kind > 3:
            raise DecodeError(EXIT_UNSUPPORTED, 'unknown column kind %d' % kind)
        flags = r.u8('flags')
        if flags & ~1:
            raise DecodeError(EXIT_UNSUPPORTED, 'unknown column flags %d' % flags)
        name = r.take('name', r.u16('name_length'))
        cats = []
        if kind == KIND_CATEGORICAL:
            k = r.u32('category_count')
            if not 1 <= k <= (1 << 16):
                raise invalid('category count out of range')
            cats = _names(r, 'category', k)
            if any(not _name_ok(c) for c in cats) or any(a >= b for a, b in zip(cats, cats[1:])):
                raise invalid('categories of %r not unique, non-empty, 1..1024 bytes, in byte order' % name)
        columns.append(Column(name, kind, bool(flags & 1), cats))
    classes = []
    if task == 0:
        k = r.u32('class_count')
        if k > (1 << 16):
            raise invalid('class count out of range')
        classes = _names(r, 'class', k)
    return task, columns, classes


def decode_schema(meta):
    r = Reader(meta)
    v2 = meta[:4] == SCHEMA_MAGIC
    task, columns, classes = _decode_v2(r) if v2 else _decode_v1(r)
    if r.pos != len(meta):
        raise invalid('schema has trailing bytes')
    names = [c.name for c in columns]
    if any(not _name_ok(n) for n in names) or len(set(names)) != len(names):
        raise invalid('bad column names')
    labels = [c for c in columns if c.kind == KIND_LABEL]
    if len(labels) != 1:
        raise invalid('schema must have exactly one label column')
    if labels[0].missing:
        raise invalid('the label column cannot allow missing values')
    if task == 0 and (not 2 <= len(classes) <= (1 << 16) or len(set(classes)) != len(classes) or
                      any(not _name_ok(c) for c in classes)):
        raise invalid('bad class list')
    if v2 and task == 0 and not any(c.missing or c.kind == KIND_CATEGORICAL for c in columns):
        raise invalid('a v2 schema that needs nothing of v2')
    for c in columns:
        c.name, c.categories = _text(c.name), [_text(x) for x in c.categories]
    return Schema(2 if v2 else 1, task, columns, [_text(c) for c in classes], r.fields)


def _f32(bits):
    return struct.unpack('<f', struct.pack('<I', bits))[0]


def record_cells(schema, r, row):
    """The CSV fields of one record (a tuple of u32 words), after checking every value
    (sealed-dataset.md, "Records")."""
    label_bits = r[-1]
    label = _f32(label_bits)
    if schema.task == 1:
        if label_bits & 0x7F800000 == 0x7F800000:
            raise invalid('record %d: regression label is not finite' % row)
        label_text = format_float32(label_bits)
    else:
        if not (0 <= label < len(schema.classes) and label == int(label)):
            raise invalid('record %d: label is not a class index' % row)
        label_text = csv_escape(schema.classes[int(label)])
    cells, f = [], 0
    for col in schema.columns:
        if col.kind == KIND_LABEL:
            cells.append(label_text)
            continue
        bits = r[f]
        f += 1
        if col.missing and bits == MISSING_BITS:
            cells.append('')
        elif col.kind == KIND_YES_NO:
            if bits & 0x7FFFFFFF == 0:
                cells.append('no')
            elif bits == 0x3F800000:
                cells.append('yes')
            else:
                raise invalid('record %d: column %s is not 0 or 1' % (row, col.name))
        elif col.kind == KIND_CATEGORICAL:
            v = _f32(bits)
            if not (0 <= v < len(col.categories) and v == int(v)):
                raise invalid('record %d: column %s is not a category index' % (row, col.name))
            cells.append(csv_escape(col.categories[int(v)]))
        else:
            if bits & 0x7F800000 == 0x7F800000:
                raise invalid('record %d: column %s is not finite' % (row, col.name))
            cells.append(format_float32(bits))
    return cells


# ------------------------------------------------- float32 -> text (as C++ std::to_chars)

def _f32_value(bits):
    return Fraction(struct.unpack('<f', struct.pack('<I', bits))[0])


def _ilog10(x):
    e = len(str(x.numerator)) - len(str(x.denominator))
    while Fraction(10) ** e > x:
        e -= 1
    while Fraction(10) ** (e + 1) <= x:
        e += 1
    return e


def _round_half_even(q):
    n, r = divmod(q.numerator, q.denominator)
    if 2 * r > q.denominator or (2 * r == q.denominator and n % 2 == 1):
        n += 1
    return n


def _shortest_digits(bits):
    """The shortest decimal digits that read back as this positive finite float32, the
    closest such to its value: returns (digits, scale), value ~ int(digits) * 10**scale."""
    x = _f32_value(bits)
    up = _f32_value(bits + 1) if bits + 1 < 0x7F800000 else Fraction(2) ** 128
    down = _f32_value(bits - 1) if bits > 0 else Fraction(0)
    lo, hi = (down + x) / 2, (x + up) / 2
    even = bits % 2 == 0
    e = _ilog10(x)
    for p in range(1, 10):
        scale = e - p + 1
        unit = Fraction(10) ** scale
        n = _round_half_even(x / unit)
        best = None
        for c in (n - 1, n, n + 1):
            d = c * unit
            if c > 0 and (lo < d < hi or (even and (d == lo or d == hi))):
                key = (abs(d - x), c % 2)
                if best is None or key < best[0]:
                    best = (key, c)
        if best is not None:
            c = best[1]
            while c % 10 == 0:
                c //= 10
                scale += 1
            return str(c), scale
    raise AssertionError('no round-trip representation')


_FORMAT_CACHE = {}


def format_float32(bits):
    """C++17 std::to_chars(float) without a format: the shortest round-trip form, fixed or
    scientific (e+XX), whichever is shorter, fixed on a tie; integers print exactly."""
    s = _FORMAT_CACHE.get(bits)
    if s is not None:
        return s
    sign = '-' if bits & 0x80000000 else ''
    mag = bits & 0x7FFFFFFF
    if mag >= 0x7F800000:
        raise invalid('non-finite value')
    if mag == 0:
        s = sign + '0'
    else:
        digits, scale = _shortest_digits(mag)
        n = len(digits)
        e10 = scale + n - 1
        sci = digits[0] + ('.' + digits[1:] if n > 1 else '') + 'e' + ('-' if e10 < 0 else '+') + '%02d' % abs(e10)
        if scale >= 0:
            fixed = str(int(_f32_value(mag))) if scale > 0 else digits
            fixed_len = n + scale
        elif e10 >= 0:
            fixed = digits[:e10 + 1] + '.' + digits[e10 + 1:]
            fixed_len = len(fixed)
        else:
            fixed = '0.' + '0' * (-e10 - 1) + digits
            fixed_len = len(fixed)
        s = sign + (fixed if fixed_len <= len(sci) else sci)
    _FORMAT_CACHE[bits] = s
    return s


def csv_escape(cell):
    if cell and not any(c in cell for c in ',"\r\n'):
        return cell
    return '"' + cell.replace('"', '""') + '"'


# --------------------------------------------------------------------------- whole files

def read_file(path):
    with open(path, 'rb') as f:
        return f.read()


def check_size(data, h):
    """Step 4: the file size is fixed by the header."""
    if len(data) != file_size_for(h):
        raise auth_failed('file is %d bytes, header says %d' % (len(data), file_size_for(h)))


def inspect(data):
    h = parse_header(data)
    check_size(data, h)
    return h


def decode_to_csv(data, keystore):
    """All checks in the documented order; returns the CSV text (str)."""
    h = inspect(data)
    if h['content_type'] != CONTENT_TABULAR:
        raise invalid('not a tabular dataset')
    if h['keystore_id'] != keystore.id:
        raise DecodeError(EXIT_NOT_FOUND, 'sealed with another keystore')
    dek = keystore.data_key(h['object_id'], h['key_id'])
    entry_suite = keystore.data_key_suite(h['object_id'], h['key_id'])
    if entry_suite != h['suite']:
        raise auth_failed('header says suite %s, the keystore entry says %s'
                          % (SUITE_BY_ID[h['suite']], SUITE_BY_ID[entry_suite]))
    keys = authenticate_header(h, dek)
    schema = decode_schema(h['metadata'])
    width = len(schema.columns)
    rec = 4 * width
    if h['payload_length'] == 0 or h['payload_length'] % rec or h['chunk_size'] % rec:
        raise invalid('chunks do not hold whole records')
    out = [','.join(csv_escape(c.name) for c in schema.columns) + '\n']
    row = 0
    for plain in open_chunks(data, h, keys['payload_key']):
        words = struct.unpack('<%dI' % (len(plain) // 4), plain)
        for base in range(0, len(words), width):
            out.append(','.join(record_cells(schema, words[base:base + width], row)) + '\n')
            row += 1
    return ''.join(out), h, keys, dek


MAX_PASSPHRASE = 1023


def check_passphrase(p):
    """keystore.md: the bytes before the first LF (a CR before it is part of them), 1..1023."""
    if not p:
        raise invalid('empty passphrase')
    if len(p) > MAX_PASSPHRASE:
        raise invalid('passphrase longer than %d bytes' % MAX_PASSPHRASE)
    return p


def read_passphrase_bytes(raw):
    """A passphrase file's content: everything before the first newline."""
    return check_passphrase(raw.split(b'\n', 1)[0])


def read_passphrase(fd):
    chunks = []
    while True:
        c = os.read(fd, 1)
        if not c or c == b'\n':
            break
        chunks.append(c)
        if len(chunks) > MAX_PASSPHRASE:
            break
    return check_passphrase(b''.join(chunks))


def json_text(s):
    """A name as enclave-data's JSON shows it: bytes that are not UTF-8 become U+FFFD, one for
    each maximal ill-formed subsequence (sealed-dataset.md, "The dataset digest")."""
    return s.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')


def column_json(c):
    j = {'name': json_text(c.name), 'kind': KIND_NAMES[c.kind], 'missing_allowed': c.missing}
    if c.kind == KIND_CATEGORICAL:
        j['categories'] = len(c.categories)
    return j


def header_json(h):
    schema = decode_schema(h['metadata'])
    return {
        'format_version': h['version'], 'suite': SUITE_BY_ID[h['suite']], 'dataset_id': h['object_id'],
        'keystore_id': h['keystore_id'].hex(), 'key_id': h['key_id'].hex(), 'chunk_bytes': h['chunk_size'],
        'payload_bytes': h['payload_length'], 'chunks': h['chunk_count'], 'file_bytes': file_size_for(h),
        'rows': h['payload_length'] // (4 * len(schema.columns)),
        'schema': {'version': schema.version, 'task': TASK_NAMES[schema.task],
                   'columns': [column_json(c) for c in schema.columns],
                   'classes': [json_text(c) for c in schema.classes], 'features': len(schema.columns) - 1},
    }


# ------------------------------------------------------------ exported models (model-export.md)

PUB_FORMAT = 'enclave-export-public-key'
PUB_MAX_BYTES = 64 << 10
FORMAT_ID_CHARS = frozenset(b'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/+')
WRAP_INFO = b'enclave model-export v1 wrap key'
WRAP_AAD_LABEL = b'enclave model-export v1 dek'
FINGERPRINT_LABEL = b'enclave export key v1'


def fingerprint(keystore_id, key_id, public_key):
    return hashlib.sha256(FINGERPRINT_LABEL + keystore_id + key_id + public_key).digest()


def parse_public_key(raw):
    """The export public key file: a dict with keystore_id, key_id, name, public_key."""
    if len(raw) > PUB_MAX_BYTES:
        raise invalid('public key file larger than 64 KiB')
    try:
        doc = json.loads(raw)
    except ValueError:
        raise invalid('not a JSON public key file') from None
    if not isinstance(doc, dict) or doc.get('format') != PUB_FORMAT:
        raise invalid('not an enclave export public key file')
    version = _uint_field(doc, 'version')
    if version != 1:
        raise DecodeError(EXIT_UNSUPPORTED, 'public key file version %d' % version)
    if _str_field(doc, 'algorithm') != 'x25519':
        raise DecodeError(EXIT_UNSUPPORTED, 'unknown public key algorithm')
    key = {'keystore_id': _hex_field(doc, 'keystore_id', 16), 'key_id': _hex_field(doc, 'key_id', 16),
           'name': _str_field(doc, 'name')}
    validate_object_id(key['name'])
    key['public_key'] = _hex_field(doc, 'public_key', 32)
    fp = _hex_field(doc, 'fingerprint', 32)
    if not hmac.compare_digest(fp, fingerprint(key['keystore_id'], key['key_id'], key['public_key'])):
        raise invalid('fingerprint does not match the key')
    return key


def validate_format_id(s):
    b = s if isinstance(s, bytes) else s.encode('utf-8', 'surrogatepass')
    if not 1 <= len(b) <= 128:
        raise invalid('model format id must be 1..128 bytes')
    if any(c not in FORMAT_ID_CHARS for c in b):
        raise invalid('model format id has a character outside A-Z a-z 0-9 . _ - : / +')


def parse_model_metadata(meta):
    r = Reader(meta)
    if r.u16('metadata_version') != 1:
        raise DecodeError(EXIT_UNSUPPORTED, 'model metadata version')
    if r.u16('recipient_kind') != 1:
        raise DecodeError(EXIT_UNSUPPORTED, 'unknown recipient kind')
    m = {'recipient_public_key': r.take('recipient_public_key', 32),
         'ephemeral_public_key': r.take('ephemeral_public_key', 32),
         'wrapped_dek': r.take('wrapped_dek', 48),
         'job_digest': r.take('job_digest', 32),
         'created': r.u64('created')}
    fid = r.take('format_id', r.u16('format_id_length'))
    validate_format_id(fid)
    m['format_id'] = fid.decode('ascii')
    if r.pos != len(meta):
        raise invalid('model metadata has trailing bytes')
    m['fields'] = r.fields
    return m


def wrap_key_for(shared, ephemeral, recipient):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=WRAP_INFO).derive(shared)


def wrap_aad(keystore_id, key_id):
    return WRAP_AAD_LABEL + keystore_id + key_id


def open_model(data, keystore):
    """Every check of model-export.md in order; returns (model bytes, header, metadata)."""
    h = inspect(data)
    if h['content_type'] != CONTENT_MODEL:
        raise invalid('not an exported model')
    m = parse_model_metadata(h['metadata'])
    if h['keystore_id'] != keystore.id:
        raise DecodeError(EXIT_NOT_FOUND, 'sealed to an export key of another keystore')
    private, public = keystore.export_private_key(h['key_id'])
    if m['recipient_public_key'] != public:
        raise auth_failed('recipient public key is not this export key')
    shared = x25519(private, m['ephemeral_public_key'])
    if shared is None:
        raise auth_failed('ephemeral public key is a low-order point')
    wk = wrap_key_for(shared, m['ephemeral_public_key'], m['recipient_public_key'])
    try:
        dek = ChaCha20Poly1305(wk).decrypt(bytes(12), m['wrapped_dek'], wrap_aad(h['keystore_id'], h['key_id']))
    except InvalidTag:
        raise auth_failed('recipient block failed to unwrap') from None
    keys = authenticate_header(h, dek)
    return b''.join(open_chunks(data, h, keys['payload_key'])), h, m


def seal_model(pub, model, format_id, suite=1, chunk_size=1 << 20, model_id='model', job_digest=bytes(32),
               created=None, ephemeral=None, dek=None, salt=None):
    """An independent sealer (model-export.md, "Sealing to a public key")."""
    validate_format_id(format_id)
    validate_object_id(model_id)
    if not 1 <= chunk_size <= MAX_CHUNK:
        raise invalid('chunk size out of range')
    e = ephemeral if ephemeral is not None else os.urandom(32)
    big_e = x25519_base(e)
    shared = x25519(e, pub['public_key'])
    if shared is None:
        raise invalid('export public key is a low-order point')
    dek = dek if dek is not None else os.urandom(32)
    wrapped = ChaCha20Poly1305(wrap_key_for(shared, big_e, pub['public_key'])).encrypt(
        bytes(12), dek, wrap_aad(pub['keystore_id'], pub['key_id']))
    fid = format_id.encode()
    meta = (struct.pack('<HH', 1, 1) + pub['public_key'] + big_e + wrapped + job_digest +
            struct.pack('<QH', created if created is not None else int(__import__('time').time()), len(fid)) + fid)
    oid = model_id.encode()
    n = chunk_count_for(len(model), chunk_size)
    salt = salt if salt is not None else os.urandom(32)
    header_length = 174 + len(oid) + len(meta)
    body = (MAGIC + struct.pack('<HHHHI', 1, suite, CONTENT_MODEL, 0, header_length) + pub['keystore_id'] +
            pub['key_id'] + salt + struct.pack('<IQQH', chunk_size, len(model), n, len(oid)) + oid +
            struct.pack('<I', len(meta)) + meta)
    k = derive_subkeys(dek, salt)
    body += k['commitment']
    header = body + hmac.new(k['header_key'], body, hashlib.sha256).digest()
    assert len(header) == header_length
    digest = hashlib.sha256(header).digest()
    aead = make_aead(suite, k['payload_key'])
    out = [header]
    for i in range(n):
        out.append(aead.encrypt(chunk_nonce(i, i + 1 == n), model[i * chunk_size:(i + 1) * chunk_size], digest))
    return b''.join(out)


def model_json(h, m, data):
    return {
        'content': 'exported-model', 'format_version': h['version'], 'model_id': h['object_id'],
        'suite': SUITE_BY_ID[h['suite']], 'keystore_id': h['keystore_id'].hex(), 'key_id': h['key_id'].hex(),
        'recipient_public_key': m['recipient_public_key'].hex(), 'model_format': m['format_id'],
        'job_digest': None if m['job_digest'] == bytes(32) else m['job_digest'].hex(),
        'created': __import__('time').strftime('%Y-%m-%dT%H:%M:%SZ', __import__('time').gmtime(m['created'])),
        'created_unix': m['created'], 'chunk_bytes': h['chunk_size'], 'chunks': h['chunk_count'],
        'payload_bytes': h['payload_length'], 'file_bytes': file_size_for(h),
        'sha256': hashlib.sha256(data).hexdigest(),
    }


# ------------------------------------------- the worked example's tables (for the docs)

def _spaced(b):
    return ' '.join('%02x' % x for x in b)


def _describe(name, b, h):
    le = {1: '<B', 2: '<H', 4: '<I', 8: '<Q'}
    if name == 'magic':
        return '"%s"' % b.decode()
    if name == 'suite':
        return '%d = %s' % (h['suite'], SUITE_BY_ID[h['suite']])
    if name == 'content_type':
        return '%d = tabular dataset' % h['content_type']
    if name in ('version', 'reserved', 'header_length', 'chunk_size', 'payload_length', 'chunk_count',
                'object_id_length', 'metadata_length', 'column_count', 'name_length', 'class_count',
                'class_length', 'schema_version', 'task', 'flags', 'category_count', 'category_length'):
        return '%d' % struct.unpack(le[len(b)], b)[0]
    if name == 'kind':
        return '%d = %s' % (b[0], KIND_NAMES.get(b[0], '?'))
    if name in ('object_id', 'name', 'class', 'category', 'schema_magic'):
        return '"%s"' % b.decode()
    return ''


def explain(data, keystore, dataset_doc=True):
    """Markdown for the worked examples: the annotated header and the derived values."""
    csv_text, h, keys, dek = decode_to_csv(data, keystore)
    lines = ['| offset | bytes (hex) | field | value |', '| --- | --- | --- | --- |']
    for off, name, b in h['fields']:
        if name == 'metadata':
            for so, sname, sb in decode_schema(b).fields:
                lines.append('| 0x%04x | `%s` | metadata: %s | %s |' % (off + so, _spaced(sb), sname,
                                                                      _describe(sname, sb, h)))
            continue
        for i in range(0, max(len(b), 1), 16):
            part = b[i:i + 16]
            label = name if i == 0 else '%s (cont.)' % name
            lines.append('| 0x%04x | `%s` | %s | %s |' % (off + i, _spaced(part), label,
                                                          _describe(name, b, h) if i == 0 else ''))
    n = h['chunk_count']
    values = [('dek', dek), ('salt', h['salt']), ('payload_key', keys['payload_key']),
              ('header_key', keys['header_key']), ('commitment', keys['commitment']),
              ('header_tag', h['tag']), ('header_digest', h['header_digest'])]
    aead = make_aead(h['suite'], keys['payload_key'])
    for i in range(n):
        off, size = chunk_offset(h, i), chunk_plain_size(h, i)
        nonce = chunk_nonce(i, i + 1 == n)
        values += [('chunk%d_offset' % i, off), ('chunk%d_nonce' % i, nonce),
                   ('chunk%d_ciphertext' % i, data[off:off + size]),
                   ('chunk%d_tag' % i, data[off + size:off + size + TAG]),
                   ('chunk%d_plaintext' % i, aead.decrypt(nonce, data[off:off + size + TAG], h['header_digest']))]
    values += [('file_sha256', hashlib.sha256(data).digest()), ('file_bytes', len(data))]
    vlines = ['| name | value |', '| --- | --- |']
    for name, v in values:
        vlines.append('| %s | `%s` |' % (name, v.hex() if isinstance(v, bytes) else v))
    return '\n'.join(lines), '\n'.join(vlines), csv_text


def example_values(data, keystore):
    """name -> hex (or decimal) string for every value the docs quote about the example."""
    _, vtable, _ = explain(data, keystore)
    out = {}
    for line in vtable.splitlines()[2:]:
        name, value = [c.strip() for c in line.strip('|').split('|')]
        out[name] = value.strip('`')
    out['passphrase_key'] = keystore.passphrase_key.hex()
    out['kek'] = keystore.kek.hex()
    out['kek_aad'] = kek_aad(keystore.id, keystore.opslimit, keystore.memlimit, keystore.kdf_salt).hex()
    h = parse_header(data)
    e = [x for x in keystore.entries if x['dataset_id'] == h['object_id'] and x['key_id'] == h['key_id']][0]
    out['dek_aad'] = dek_aad(keystore.id, e['key_id'], SUITE_NAMES[e['suite']], e['dataset_id']).hex()
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('verb', choices=['decode', 'inspect', 'explain', 'open-model', 'seal-to'])
    ap.add_argument('sealed', help='the sealed file (seal-to: the model to seal)')
    ap.add_argument('--keystore')
    ap.add_argument('--passphrase-fd', type=int)
    ap.add_argument('--out')
    ap.add_argument('--pub')
    ap.add_argument('--format-id')
    ap.add_argument('--suite', default='aes-256-gcm')
    ap.add_argument('--chunk-bytes', type=int, default=1 << 20)
    ap.add_argument('--model-id', default='model')
    ap.add_argument('--job-digest')
    a = ap.parse_args(argv)
    try:
        data = read_file(a.sealed)
        if a.verb == 'seal-to':
            if not (a.pub and a.out and a.format_id) or a.suite not in SUITE_NAMES:
                print('enclave_decode: seal-to needs --pub, --out, --format-id and a known --suite', file=sys.stderr)
                return 2
            pub = parse_public_key(read_file(a.pub))
            job = bytes.fromhex(a.job_digest) if a.job_digest else bytes(32)
            sealed = seal_model(pub, data, a.format_id, SUITE_NAMES[a.suite], a.chunk_bytes, a.model_id, job)
            with open(a.out, 'xb') as f:
                f.write(sealed)
            return 0
        if a.verb == 'inspect':
            h = inspect(data)
            if h['content_type'] == CONTENT_MODEL:
                print(json.dumps(model_json(h, parse_model_metadata(h['metadata']), data), indent=2))
                return 0
            j = header_json(h)
            j['sha256'] = hashlib.sha256(data).hexdigest()
            print(json.dumps(j, indent=2))
            return 0
        if a.keystore is None or a.passphrase_fd is None:
            print('enclave_decode: %s needs --keystore and --passphrase-fd' % a.verb, file=sys.stderr)
            return 2
        ks = Keystore(a.keystore, read_passphrase(a.passphrase_fd))
        if a.verb == 'explain':
            header, values, _ = explain(data, ks)
            print(header + '\n\n' + values)
            return 0
        if a.verb == 'open-model':
            model, _, _ = open_model(data, ks)
            if not a.out:
                print('enclave_decode: open-model needs --out', file=sys.stderr)
                return 2
            with open(a.out, 'wb') as f:
                f.write(model)
            return 0
        text, _, _, _ = decode_to_csv(data, ks)
        if not a.out:
            print('enclave_decode: decode needs --out', file=sys.stderr)
            return 2
        with open(a.out, 'w', encoding='utf-8', errors='surrogateescape', newline='') as f:
            f.write(text)
        return 0
    except DecodeError as e:
        print('enclave_decode: %s: %s' % (a.sealed, e), file=sys.stderr)
        return e.code


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
