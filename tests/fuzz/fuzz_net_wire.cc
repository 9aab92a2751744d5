// Fuzz target: every parser of bytes a network peer controls in the encrypted NCCL
// transport (net/src/wire.h): the listen handle (it travels through NCCL's plaintext
// bootstrap), ClientHello, ServerHello, ClientFinished, the record header, and a whole
// record opened under the fixed fuzz key. The first input byte picks the parser; the
// rest is its input. Seeds: corpus/net_wire/ (the record seeds are sealed under the
// fixed key, so the fuzzer starts past the tag check).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_util.h"
#include "wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enclave;
  using namespace enclave::net;
  if (size == 0) return 0;
  const ByteSpan in(data + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto ch = ParseClientHello(in);
      // What the parser promises: ranges hold, and re-encoding gives the same bytes.
      if (ch.ok()) {
        if (ch->nsocks < 1 || ch->nsocks > kMaxSockets || ch->socket_index >= ch->nsocks) __builtin_trap();
        auto again = EncodeClientHello(*ch);
        if (std::memcmp(again.data(), in.data(), again.size()) != 0) __builtin_trap();
      }
      break;
    }
    case 1: {
      auto sh = ParseServerHello(in);
      if (sh.ok()) {
        auto body = EncodeServerHelloBody(*sh);
        if (std::memcmp(body.data(), in.data(), body.size()) != 0) __builtin_trap();
      }
      break;
    }
    case 2: (void)ParseClientFinished(in); break;
    case 3: {
      if (in.size() < kHandleBytes) return 0;
      auto h = DecodeHandle(std::span<const uint8_t, kHandleBytes>(in.data(), kHandleBytes));
      if (h.ok() && ((h->family != 4 && h->family != 6) || h->port == 0)) __builtin_trap();
      break;
    }
    case 4:
    case 5: {
      if (in.size() < kRecordHeaderBytes) return 0;
      auto h = ParseRecordHeader(in.first(kRecordHeaderBytes));
      if (!h.ok()) return 0;
      if (h->payload_len > kMaxRecordPayload || h->payload_len > h->msg_size) __builtin_trap();
      const ByteSpan rest = in.subspan(kRecordHeaderBytes);
      if (rest.size() != h->payload_len + kRecordTagBytes) return 0;
      static const crypto::SecretBytes key = fuzz::FixedDek();
      static auto aead = std::move(crypto::Aead::Create(crypto::Suite::kAes256Gcm, key)).value();
      RecordHeaderBytes header{};
      std::memcpy(header.data(), in.data(), header.size());
      std::vector<uint8_t> buf(rest.begin(), rest.end());
      Status st = OpenRecordInPlace(*aead, header, h->seq, buf);
      if (!st.ok()) {
        // Nothing unauthenticated is left behind.
        for (size_t i = 0; i < h->payload_len; ++i)
          if (buf[i] != 0) __builtin_trap();
      }
      break;
    }
  }
  return 0;
}
