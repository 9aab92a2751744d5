// Group commit of one durability barrier (an fsync) among the threads that need it.
//
// A writer makes its change (a write(), a link(), a WAL commit), takes a ticket with
// Issue(), and calls Through(ticket): it returns once a sync that began after the ticket
// was issued has completed. One caller at a time runs the sync, for every ticket issued
// before it began; the others wait for it, so N concurrent writers cost one fsync, not N.
//
// A failed sync poisons the barrier for good: every later Through() fails with the first
// error. (After a failed fsync Linux may report the next one clean although the data was
// dropped, so nothing written before the failure can be known durable again.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "enclave/common/status.h"

namespace enclave {

class GroupSync {
 public:
  explicit GroupSync(std::function<Status()> sync) : sync_(std::move(sync)) {}
  GroupSync(const GroupSync&) = delete;
  GroupSync& operator=(const GroupSync&) = delete;

  // A ticket for everything this thread wrote before the call.
  uint64_t Issue();
  // Blocks until a sync covering `ticket` completed: OkStatus, or the poisoning error.
  Status Through(uint64_t ticket);
  // Issue() then Through().
  Status Sync() { return Through(Issue()); }

  uint64_t syncs() const;  // how many syncs ran (for tests and benchmarks)

 private:
  std::function<Status()> sync_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  uint64_t issued_ = 0;
  uint64_t synced_ = 0;  // every ticket up to this one is durable
  bool running_ = false;
  uint64_t syncs_ = 0;
  Status failed_;  // sticky
};

}  // namespace enclave
