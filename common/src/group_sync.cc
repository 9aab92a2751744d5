#include "enclave/common/group_sync.h"

namespace enclave {

uint64_t GroupSync::Issue() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++issued_;
}

Status GroupSync::Through(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!failed_.ok()) return failed_;
    if (synced_ >= ticket) return OkStatus();
    if (running_) {
      done_.wait(lock);
      continue;
    }
    // Lead a sync for every ticket issued so far: their writes completed before Issue().
    running_ = true;
    const uint64_t target = issued_;
    lock.unlock();
    Status s = sync_();
    lock.lock();
    running_ = false;
    ++syncs_;
    if (s.ok()) {
      synced_ = target;
    } else {
      failed_ = s;
    }
    done_.notify_all();
  }
}

uint64_t GroupSync::syncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return syncs_;
}

}  // namespace enclave
