#include "wire.h"

#include <cstring>
#include <string>

namespace enclave::net {
namespace {

constexpr uint8_t kMagic[4] = {'E', 'N', 'C', 'N'};
constexpr uint8_t kHandleMagic[4] = {'E', 'N', 'C', 'H'};

void Preamble(ByteWriter& w, MsgType type, size_t total) {
  w.Bytes(ByteSpan(kMagic, 4));
  w.U8(kProtocolVersion);
  w.U8(static_cast<uint8_t>(type));
  w.U16(static_cast<uint16_t>(total));
}

Status ReadPreamble(ByteReader& r, ByteSpan in, MsgType type, size_t total, std::string_view what) {
  if (in.size() != total) {
    return AuthFailed(std::string(what) + ": " + std::to_string(in.size()) + " bytes, expected " +
                      std::to_string(total));
  }
  ByteSpan magic;
  uint8_t version = 0, t = 0;
  uint16_t len = 0;
  RETURN_IF_ERROR(r.Bytes("magic", 4, &magic));
  RETURN_IF_ERROR(r.U8("version", &version));
  RETURN_IF_ERROR(r.U8("type", &t));
  RETURN_IF_ERROR(r.U16("length", &len));
  if (std::memcmp(magic.data(), kMagic, 4) != 0) return AuthFailed(std::string(what) + ": bad magic (not ENCN)");
  if (version != kProtocolVersion) {
    return Unsupported(std::string(what) + ": protocol version " + std::to_string(version) + ", expected " +
                       std::to_string(kProtocolVersion));
  }
  if (t != static_cast<uint8_t>(type)) {
    return AuthFailed(std::string(what) + ": message type " + std::to_string(t) + ", expected " +
                      std::to_string(static_cast<int>(type)));
  }
  if (len != total) return AuthFailed(std::string(what) + ": length field " + std::to_string(len));
  return OkStatus();
}

template <size_t N>
Status ReadArray(ByteReader& r, std::string_view field, std::array<uint8_t, N>* out) {
  ByteSpan b;
  RETURN_IF_ERROR(r.Bytes(field, N, &b));
  std::memcpy(out->data(), b.data(), N);
  return OkStatus();
}

Status CheckSockets(std::string_view what, uint16_t suite, uint16_t index, uint16_t nsocks, uint16_t reserved) {
  if (suite != kSuiteAes256Gcm) return Unsupported(std::string(what) + ": suite " + std::to_string(suite));
  if (nsocks < 1 || nsocks > kMaxSockets) {
    return AuthFailed(std::string(what) + ": nsocks " + std::to_string(nsocks) + " outside 1.." +
                      std::to_string(kMaxSockets));
  }
  if (index >= nsocks) {
    return AuthFailed(std::string(what) + ": socket index " + std::to_string(index) + " >= nsocks " +
                      std::to_string(nsocks));
  }
  if (reserved != 0) return AuthFailed(std::string(what) + ": reserved field is not zero");
  return OkStatus();
}

template <size_t N>
void CopyOut(ByteWriter& w, std::array<uint8_t, N>& out) {
  std::memcpy(out.data(), w.bytes().data(), N);
}

}  // namespace

void EncodeHandle(const ListenHandle& h, std::span<uint8_t, kHandleBytes> out) {
  std::memset(out.data(), 0, out.size());
  ByteWriter w;
  w.Bytes(ByteSpan(kHandleMagic, 4));
  w.U8(kProtocolVersion);
  w.U8(h.family);
  w.U16(h.port);
  w.Bytes(h.addr);
  w.Bytes(h.listen_id);
  std::memcpy(out.data(), w.bytes().data(), w.size());
  for (int i = 0; i < 8; ++i) out[kHandleTokenOffset + i] = static_cast<uint8_t>(h.connect_token >> (8 * i));
}

Result<ListenHandle> DecodeHandle(std::span<const uint8_t, kHandleBytes> in) {
  ByteReader r(ByteSpan(in.data(), in.size()));
  ListenHandle h;
  ByteSpan magic;
  uint8_t version = 0;
  RETURN_IF_ERROR(r.Bytes("magic", 4, &magic));
  RETURN_IF_ERROR(r.U8("version", &version));
  RETURN_IF_ERROR(r.U8("family", &h.family));
  RETURN_IF_ERROR(r.U16("port", &h.port));
  RETURN_IF_ERROR(ReadArray(r, "addr", &h.addr));
  RETURN_IF_ERROR(ReadArray(r, "listen_id", &h.listen_id));
  if (std::memcmp(magic.data(), kHandleMagic, 4) != 0) return InvalidInput("listen handle: bad magic (not ENCH)");
  if (version != kProtocolVersion) return Unsupported("listen handle: version " + std::to_string(version));
  if (h.family != 4 && h.family != 6) return InvalidInput("listen handle: address family " + std::to_string(h.family));
  if (h.port == 0) return InvalidInput("listen handle: port 0");
  // Every byte the format says is zero: the IPv4 address's padding, and all but the
  // connect token after the listen id. A handle with anything else there is not what
  // listen() wrote (and not a handle of this protocol version).
  struct ZeroRange {
    size_t from, to;
    const char* what;
  };
  const size_t pad_from = h.family == 4 ? kHandleAddrOffset + 4 : kHandleAddrOffset + 16;
  const ZeroRange zero[] = {{pad_from, kHandleAddrOffset + 16, "padding after the IPv4 address"},
                            {kHandleListenIdOffset + kIdBytes, kHandleTokenOffset, "reserved"},
                            {kHandleTokenOffset + 8, kHandleBytes, "reserved"}};
  for (const ZeroRange& z : zero) {
    for (size_t i = z.from; i < z.to; ++i) {
      if (in[i] != 0) return InvalidInput("listen handle: byte " + std::to_string(i) + " (" + z.what + ") is not zero");
    }
  }
  for (int i = 0; i < 8; ++i) h.connect_token |= static_cast<uint64_t>(in[kHandleTokenOffset + i]) << (8 * i);
  return h;
}

std::array<uint8_t, kClientHelloBytes> EncodeClientHello(const ClientHello& m) {
  ByteWriter w;
  Preamble(w, MsgType::kClientHello, kClientHelloBytes);
  w.Bytes(m.listen_id);
  w.Bytes(m.client_random);
  w.Bytes(m.endpoint_id);
  w.U64(m.comm_id);
  w.U16(m.socket_index);
  w.U16(m.nsocks);
  w.U16(m.suite);
  w.U16(0);
  std::array<uint8_t, kClientHelloBytes> out{};
  CopyOut(w, out);
  return out;
}

Result<ClientHello> ParseClientHello(ByteSpan in) {
  ByteReader r(in);
  RETURN_IF_ERROR(ReadPreamble(r, in, MsgType::kClientHello, kClientHelloBytes, "ClientHello"));
  ClientHello m;
  uint16_t reserved = 0;
  RETURN_IF_ERROR(ReadArray(r, "listen_id", &m.listen_id));
  RETURN_IF_ERROR(ReadArray(r, "client_random", &m.client_random));
  RETURN_IF_ERROR(ReadArray(r, "endpoint_id", &m.endpoint_id));
  RETURN_IF_ERROR(r.U64("comm_id", &m.comm_id));
  RETURN_IF_ERROR(r.U16("socket_index", &m.socket_index));
  RETURN_IF_ERROR(r.U16("nsocks", &m.nsocks));
  RETURN_IF_ERROR(r.U16("suite", &m.suite));
  RETURN_IF_ERROR(r.U16("reserved", &reserved));
  RETURN_IF_ERROR(CheckSockets("ClientHello", m.suite, m.socket_index, m.nsocks, reserved));
  return m;
}

std::array<uint8_t, kServerHelloBodyBytes> EncodeServerHelloBody(const ServerHello& m) {
  ByteWriter w;
  Preamble(w, MsgType::kServerHello, kServerHelloBytes);
  w.Bytes(m.listen_id);
  w.Bytes(m.server_random);
  w.Bytes(m.endpoint_id);
  w.U64(m.comm_id);
  w.U16(m.socket_index);
  w.U16(m.nsocks);
  w.U16(m.suite);
  w.U16(0);
  std::array<uint8_t, kServerHelloBodyBytes> out{};
  CopyOut(w, out);
  return out;
}

Result<ServerHello> ParseServerHello(ByteSpan in) {
  ByteReader r(in);
  RETURN_IF_ERROR(ReadPreamble(r, in, MsgType::kServerHello, kServerHelloBytes, "ServerHello"));
  ServerHello m;
  uint16_t reserved = 0;
  RETURN_IF_ERROR(ReadArray(r, "listen_id", &m.listen_id));
  RETURN_IF_ERROR(ReadArray(r, "server_random", &m.server_random));
  RETURN_IF_ERROR(ReadArray(r, "endpoint_id", &m.endpoint_id));
  RETURN_IF_ERROR(r.U64("comm_id", &m.comm_id));
  RETURN_IF_ERROR(r.U16("socket_index", &m.socket_index));
  RETURN_IF_ERROR(r.U16("nsocks", &m.nsocks));
  RETURN_IF_ERROR(r.U16("suite", &m.suite));
  RETURN_IF_ERROR(r.U16("reserved", &reserved));
  RETURN_IF_ERROR(ReadArray(r, "server_finished", &m.server_finished));
  RETURN_IF_ERROR(CheckSockets("ServerHello", m.suite, m.socket_index, m.nsocks, reserved));
  return m;
}

std::array<uint8_t, kClientFinishedBytes> EncodeClientFinished(const Mac& mac) {
  ByteWriter w;
  Preamble(w, MsgType::kClientFinished, kClientFinishedBytes);
  w.Bytes(mac);
  std::array<uint8_t, kClientFinishedBytes> out{};
  CopyOut(w, out);
  return out;
}

Result<Mac> ParseClientFinished(ByteSpan in) {
  ByteReader r(in);
  RETURN_IF_ERROR(ReadPreamble(r, in, MsgType::kClientFinished, kClientFinishedBytes, "ClientFinished"));
  Mac mac{};
  RETURN_IF_ERROR(ReadArray(r, "client_finished", &mac));
  return mac;
}

Result<SocketKeys> DeriveSocketKeys(const crypto::SecretBytes& job_key, ByteSpan client_hello,
                                    ByteSpan server_hello_body) {
  if (job_key.size() < 32) return FailedPrecondition("job key shorter than 32 bytes");
  SocketKeys k;
  crypto::Sha256Hasher h;
  h.Update(client_hello);
  h.Update(server_hello_body);
  k.transcript = h.Final();
  ASSIGN_OR_RETURN(k.server_finished,
                   crypto::HkdfSha256(job_key, k.transcript, "enclave-net v1 server finished", 32));
  ASSIGN_OR_RETURN(k.client_finished,
                   crypto::HkdfSha256(job_key, k.transcript, "enclave-net v1 client finished", 32));
  ASSIGN_OR_RETURN(k.data, crypto::HkdfSha256(job_key, k.transcript, "enclave-net v1 data c2s", 32));
  return k;
}

Mac FinishedMac(const crypto::SecretBytes& key, const crypto::Digest256& transcript) {
  return crypto::HmacSha256(key, transcript);
}

RecordHeaderBytes EncodeRecordHeader(const RecordHeader& h) {
  ByteWriter w;
  w.U8(h.type);
  w.U8(0);
  w.U16(0);
  w.U32(h.payload_len);
  w.U64(h.seq);
  w.U64(h.msg_index);
  w.U64(h.msg_size);
  RecordHeaderBytes out{};
  CopyOut(w, out);
  return out;
}

Result<RecordHeader> ParseRecordHeader(ByteSpan in) {
  if (in.size() != kRecordHeaderBytes) return AuthFailed("record header: wrong size");
  ByteReader r(in);
  RecordHeader h;
  uint8_t r8 = 0;
  uint16_t r16 = 0;
  RETURN_IF_ERROR(r.U8("type", &h.type));
  RETURN_IF_ERROR(r.U8("reserved8", &r8));
  RETURN_IF_ERROR(r.U16("reserved16", &r16));
  RETURN_IF_ERROR(r.U32("payload_len", &h.payload_len));
  RETURN_IF_ERROR(r.U64("seq", &h.seq));
  RETURN_IF_ERROR(r.U64("msg_index", &h.msg_index));
  RETURN_IF_ERROR(r.U64("msg_size", &h.msg_size));
  if (h.type != kRecordData) return AuthFailed("record header: type " + std::to_string(h.type) + ", expected 1");
  if (r8 != 0 || r16 != 0) return AuthFailed("record header: reserved bytes are not zero");
  if (h.payload_len > kMaxRecordPayload) {
    return AuthFailed("record header: payload_len " + std::to_string(h.payload_len) + " > " +
                      std::to_string(kMaxRecordPayload));
  }
  if (h.msg_size > kMaxMessageBytes) return AuthFailed("record header: msg_size " + std::to_string(h.msg_size));
  if (h.payload_len > h.msg_size) return AuthFailed("record header: payload_len > msg_size");
  return h;
}

std::array<uint8_t, crypto::kAeadNonceBytes> RecordNonce(uint64_t seq) {
  std::array<uint8_t, crypto::kAeadNonceBytes> n{};
  for (int i = 0; i < 8; ++i) n[static_cast<size_t>(i)] = static_cast<uint8_t>(seq >> (8 * i));
  return n;
}

Status SealRecord(crypto::Aead& aead, const RecordHeaderBytes& header, uint64_t seq, ByteSpan plaintext,
                  std::span<uint8_t> out) {
  return aead.Seal(RecordNonce(seq), header, plaintext, out);
}

Status OpenRecordInPlace(crypto::Aead& aead, const RecordHeaderBytes& header, uint64_t seq, std::span<uint8_t> buf) {
  if (buf.size() < kRecordTagBytes) return AuthFailed("record " + std::to_string(seq) + ": shorter than its tag");
  Status st = aead.Open(RecordNonce(seq), header, buf, buf.first(buf.size() - kRecordTagBytes));
  if (!st.ok()) return AuthFailed("record " + std::to_string(seq) + ": AES-256-GCM tag mismatch (forged or modified)");
  return OkStatus();
}

uint64_t ChunkPlan::Length(uint64_t k) const {
  const uint64_t off = Offset(k);
  if (off >= size) return 0;
  return size - off < chunk_size ? size - off : chunk_size;
}

ChunkPlan PlanChunks(uint64_t size, int nsocks) {
  ChunkPlan p;
  p.size = size;
  p.nsocks = nsocks < 1 ? 1 : nsocks;
  if (size == 0) return p;  // one empty record
  const uint64_t n = static_cast<uint64_t>(p.nsocks);
  uint64_t per = (size + n - 1) / n;
  per = (per + 4095) / 4096 * 4096;
  if (per < kMinChunk) per = kMinChunk;
  if (per > kMaxRecordPayload) per = kMaxRecordPayload;
  p.chunk_size = per;
  p.count = (size + per - 1) / per;
  return p;
}

}  // namespace enclave::net
