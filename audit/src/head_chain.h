// The order rules of tree-head records (docs/formats/audit-log.md, section 6, step 4),
// shared by the verifier and the writer's recovery so both judge a log alike.
#pragma once

#include <cstdint>
#include <string>

#include "enclave/audit/record.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"

namespace enclave::audit::internal {

class HeadChain {
 public:
  explicit HeadChain(uint32_t header_version) : version_(header_version) {}

  // For every entry record, before the entry is counted.
  Status OnEntry() {
    if (heads_ == 0) return AuthFailed("the log does not begin with the signed tree head of size 0 (it was deleted)");
    ++entries_since_head_;
    return OkStatus();
  }

  // For every tree-head record whose signature verified. AuthFailed with a reason (the
  // caller adds the offset) when the head is out of its place in the chain.
  Status OnHead(RecordType type, const SignedTreeHead& sth) {
    if (type == RecordType::kTreeHead) {
      if (version_ != kLogVersionLegacy) return AuthFailed("a legacy (type 2) tree head in a version 2 log");
      if (chained_seen_) return AuthFailed("a legacy (type 2) tree head after a chained one");
      if (heads_ > 0 && entries_since_head_ == 0) {
        return AuthFailed("a legacy tree head with no entry since the one before it: a duplicated tree head");
      }
    } else {
      if (sth.head_index != heads_) {
        return AuthFailed("chained tree head says it is head " + std::to_string(sth.head_index) + " but follows " +
                          std::to_string(heads_) + " tree head(s): tree heads were deleted, duplicated or reordered");
      }
      const Hash expected = heads_ == 0 ? Hash{} : last_hash_;
      if (sth.previous != expected) {
        return AuthFailed("chained tree head " + std::to_string(sth.head_index) +
                          " names another previous tree head than the one before it: tree heads were replaced or "
                          "reordered");
      }
      chained_seen_ = true;
    }
    last_hash_ = TreeHeadRecordHash(sth);
    ++heads_;
    entries_since_head_ = 0;
    return OkStatus();
  }

  uint64_t heads() const { return heads_; }
  const Hash& last_hash() const { return last_hash_; }

 private:
  uint32_t version_;
  uint64_t heads_ = 0;
  uint64_t entries_since_head_ = 0;
  bool chained_seen_ = false;
  Hash last_hash_{};
};

}  // namespace enclave::audit::internal
