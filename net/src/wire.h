// The bytes of the encrypted NCCL transport: the listen handle, the three handshake
// messages, the key schedule and the record header (docs/formats/net-transport.md).
// Pure functions over untrusted bytes: the fuzz target and the unit tests call them
// directly, the transport calls nothing else to parse what a peer sent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::net {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
inline constexpr size_t kIdBytes = 16;
inline constexpr size_t kRandomBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr int kMaxSockets = 16;
inline constexpr uint16_t kSuiteAes256Gcm = 1;

using Id = std::array<uint8_t, kIdBytes>;
using Random = std::array<uint8_t, kRandomBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// What listen() hands to NCCL and NCCL ships to the connecting peer in the clear.
// Routing only: the address is not authenticated (a proxy or NAT may rewrite it); the
// listen id is, through the handshake transcript.
struct ListenHandle {
  uint8_t family = 4;          // 4 or 6
  uint16_t port = 0;
  std::array<uint8_t, 16> addr{};  // IPv4 in the first 4 bytes
  Id listen_id{};
  // Scratch the connecting side keeps between its non-blocking connect() calls (NCCL
  // passes the same handle again). Never dereferenced: a key into the context's table.
  uint64_t connect_token = 0;
};
// Offsets in the 128-byte handle (docs/formats/net-transport.md, "The listen handle").
// DecodeHandle refuses a handle with a non-zero byte where the table says zero: the
// IPv4 padding (addr bytes 4..15), bytes 40..63 and 72..127. Only the connector's token
// (64..71) may change after listen().
inline constexpr size_t kHandleAddrOffset = 8;
inline constexpr size_t kHandleListenIdOffset = 24;
inline constexpr size_t kHandleTokenOffset = 64;
void EncodeHandle(const ListenHandle& h, std::span<uint8_t, kHandleBytes> out);
Result<ListenHandle> DecodeHandle(std::span<const uint8_t, kHandleBytes> in);

// Handshake messages: fixed sizes, little-endian, an 8-byte preamble
// "ENCN" || version || type || u16 total length.
enum class MsgType : uint8_t { kClientHello = 1, kServerHello = 2, kClientFinished = 3 };
inline constexpr size_t kPreambleBytes = 8;
inline constexpr size_t kClientHelloBytes = 88;
inline constexpr size_t kServerHelloBodyBytes = 88;  // what the transcript hashes
inline constexpr size_t kServerHelloBytes = kServerHelloBodyBytes + kMacBytes;
inline constexpr size_t kClientFinishedBytes = kPreambleBytes + kMacBytes;

struct ClientHello {
  Id listen_id{};
  Random client_random{};  // one per connection, the same on each of its sockets
  Id endpoint_id{};        // the connecting plugin context
  uint64_t comm_id = 0;    // NCCL's communicator hash
  uint16_t socket_index = 0;
  uint16_t nsocks = 0;
  uint16_t suite = kSuiteAes256Gcm;
};
struct ServerHello {
  Id listen_id{};
  Random server_random{};  // one per socket
  Id endpoint_id{};
  uint64_t comm_id = 0;
  uint16_t socket_index = 0;
  uint16_t nsocks = 0;
  uint16_t suite = kSuiteAes256Gcm;
  Mac server_finished{};
};

std::array<uint8_t, kClientHelloBytes> EncodeClientHello(const ClientHello& m);
// Checks the framing and the ranges (suite, 1 <= nsocks <= 16, socket_index < nsocks).
Result<ClientHello> ParseClientHello(ByteSpan in);
// The first kServerHelloBodyBytes; the caller appends the finished MAC.
std::array<uint8_t, kServerHelloBodyBytes> EncodeServerHelloBody(const ServerHello& m);
Result<ServerHello> ParseServerHello(ByteSpan in);
std::array<uint8_t, kClientFinishedBytes> EncodeClientFinished(const Mac& mac);
Result<Mac> ParseClientFinished(ByteSpan in);

// Per-socket key schedule. T = SHA-256(ClientHello || ServerHello body); each key is
// HKDF-SHA256(ikm = job key, salt = T, info = label, 32 bytes).
struct SocketKeys {
  crypto::Digest256 transcript{};
  crypto::SecretBytes server_finished;
  crypto::SecretBytes client_finished;
  crypto::SecretBytes data;  // connector -> listener records
};
Result<SocketKeys> DeriveSocketKeys(const crypto::SecretBytes& job_key, ByteSpan client_hello,
                                    ByteSpan server_hello_body);
Mac FinishedMac(const crypto::SecretBytes& key, const crypto::Digest256& transcript);

// Records: a 32-byte header (the AEAD's associated data), payload_len bytes of
// ciphertext, a 16-byte tag. The nonce is the record's sequence number.
inline constexpr size_t kRecordHeaderBytes = 32;
inline constexpr size_t kRecordTagBytes = crypto::kAeadTagBytes;
inline constexpr uint8_t kRecordData = 1;
inline constexpr uint32_t kMaxRecordPayload = 256 * 1024;
inline constexpr uint64_t kMinChunk = 32 * 1024;
inline constexpr uint64_t kMaxMessageBytes = (uint64_t{1} << 31) - 1;  // test() reports an int

struct RecordHeader {
  uint8_t type = kRecordData;
  uint32_t payload_len = 0;
  uint64_t seq = 0;        // per socket, from 0
  uint64_t msg_index = 0;  // per connection, from 0
  uint64_t msg_size = 0;   // the whole message
};
using RecordHeaderBytes = std::array<uint8_t, kRecordHeaderBytes>;
RecordHeaderBytes EncodeRecordHeader(const RecordHeader& h);
// Framing only (type, reserved bytes, payload_len <= kMaxRecordPayload, msg_size bound).
Result<RecordHeader> ParseRecordHeader(ByteSpan in);
std::array<uint8_t, crypto::kAeadNonceBytes> RecordNonce(uint64_t seq);
// out = ciphertext || tag (plaintext.size() + 16 bytes); the header is the AAD.
Status SealRecord(crypto::Aead& aead, const RecordHeaderBytes& header, uint64_t seq, ByteSpan plaintext,
                  std::span<uint8_t> out);
// buf = ciphertext || tag; on success buf[0, size - 16) is the authenticated plaintext,
// on failure it is wiped.
Status OpenRecordInPlace(crypto::Aead& aead, const RecordHeaderBytes& header, uint64_t seq, std::span<uint8_t> buf);

// How a message of `size` bytes is cut into records over `nsocks` sockets: chunk k
// covers [k*chunk_size, min(size, (k+1)*chunk_size)) and travels on socket k % nsocks.
// A message of 0 bytes is one empty record on socket 0; socket 0 always carries chunk 0.
struct ChunkPlan {
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  uint64_t count = 1;
  int nsocks = 1;
  uint64_t Offset(uint64_t k) const { return k * chunk_size; }
  uint64_t Length(uint64_t k) const;
  int Socket(uint64_t k) const { return static_cast<int>(k % static_cast<uint64_t>(nsocks)); }
};
ChunkPlan PlanChunks(uint64_t size, int nsocks);

}  // namespace enclave::net
