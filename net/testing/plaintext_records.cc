#include "plaintext_records.h"

namespace enclave::net::testing {
namespace {

class PlainSender final : public RecordSender {
 public:
  Status Send(int fd, const RecordHeaderBytes& header, uint64_t, const uint8_t* data, uint32_t len) override {
    return SendAll2(fd, header.data(), header.size(), data, len);
  }
};

class PlainReceiver final : public RecordReceiver {
 public:
  Status Receive(int fd, const RecordHeaderBytes&, uint64_t, uint8_t* dest, uint32_t len) override {
    return RecvAll(fd, dest, len);
  }
};

class PlainRecords final : public RecordProtection {
 public:
  Result<std::unique_ptr<RecordSender>> MakeSender(const crypto::SecretBytes&) const override {
    return std::unique_ptr<RecordSender>(new PlainSender());
  }
  Result<std::unique_ptr<RecordReceiver>> MakeReceiver(const crypto::SecretBytes&) const override {
    return std::unique_ptr<RecordReceiver>(new PlainReceiver());
  }
};

}  // namespace

const RecordProtection& PlaintextProtectionForBenchmarkOnly() {
  static const PlainRecords records;
  return records;
}

}  // namespace enclave::net::testing
