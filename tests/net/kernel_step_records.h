// The plugin's GPU record layers (net/src/gpu_records.cc) with their kernels' steps run on
// the CPU (kernels/net_records.h: SealNetRecordInSegments, OpenNetRecordInSegments):
// what CI, which has no GPU, runs of the GPU path. "Device" buffers are host memory here;
// the record bytes, the order of the steps (tag checked before anything is decrypted) and
// the DataComm's routing of device buffers are the ones the GPU path uses.
// corrupt_sends: each sent record has one ciphertext (or, when empty, tag) bit flipped on
// its way out, as a man in the middle would.
#pragma once

#include <new>
#include <string>
#include <vector>

#include "enclave/kernels/net_records.h"
#include "transport.h"

namespace enclave::net::testing {

class KernelStepRecords final : public RecordProtection {
 public:
  explicit KernelStepRecords(bool corrupt_sends = false) : corrupt_(corrupt_sends) {}

  Result<std::unique_ptr<RecordSender>> MakeSender(const crypto::SecretBytes& key) const override {
    return std::unique_ptr<RecordSender>(new Sender(KeyOf(key), corrupt_));
  }
  Result<std::unique_ptr<RecordReceiver>> MakeReceiver(const crypto::SecretBytes& key) const override {
    return std::unique_ptr<RecordReceiver>(new Receiver(KeyOf(key)));
  }

 private:
  static kernels::NetRecordDeviceKey KeyOf(const crypto::SecretBytes& key) {
    kernels::NetRecordDeviceKey k;
    kernels::NetRecordDeviceKeyOf(key.ExposeSecret().data(), &k);
    return k;
  }
  class Sender final : public RecordSender {
   public:
    Sender(const kernels::NetRecordDeviceKey& k, bool corrupt)
        : key_(k), corrupt_(corrupt), staging_(kRecordHeaderBytes + kMaxRecordPayload + kRecordTagBytes) {}
    Status Send(int fd, const RecordHeaderBytes& header, uint64_t seq, const uint8_t* data, uint32_t len) override {
      std::copy(header.begin(), header.end(), staging_.begin());
      uint8_t* record = staging_.data() + kRecordHeaderBytes;
      kernels::SealNetRecordInSegments(key_, header.data(), seq, data, len, record);
      if (corrupt_) record[len / 2] ^= 0x04;
      return SendAll(fd, staging_.data(), kRecordHeaderBytes + len + kRecordTagBytes);
    }

   private:
    kernels::NetRecordDeviceKey key_;
    bool corrupt_;
    std::vector<uint8_t> staging_;
  };
  class Receiver final : public RecordReceiver {
   public:
    explicit Receiver(const kernels::NetRecordDeviceKey& k) : key_(k), staging_(kMaxRecordPayload + kRecordTagBytes) {}
    Status Receive(int fd, const RecordHeaderBytes& header, uint64_t seq, uint8_t* dest, uint32_t len) override {
      RETURN_IF_ERROR(RecvAll(fd, staging_.data(), len + kRecordTagBytes));
      if (!kernels::OpenNetRecordInSegments(key_, header.data(), seq, staging_.data(), len, dest)) {
        return AuthFailed("record " + std::to_string(seq) + ": authentication failed (kernel steps)");
      }
      return OkStatus();
    }

   private:
    kernels::NetRecordDeviceKey key_;
    std::vector<uint8_t> staging_;
  };
  bool corrupt_;
};

}  // namespace enclave::net::testing
