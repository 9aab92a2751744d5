#include "stream.h"

#include <algorithm>
#include <numeric>
#include <string_view>

#include "enclave/kernels/nn_math.h"

namespace enclave::trainer {

void WindowShuffle(const StreamLayout& layout, Rng& rng, uint32_t* order) {
  const size_t B = layout.block_rows, n = layout.train_rows, full = n / B;
  std::vector<uint32_t> blocks(layout.blocks());
  std::iota(blocks.begin(), blocks.end(), 0u);
  Shuffle(blocks.data(), full, rng);  // a short last block stays last
  size_t pos = 0;
  for (size_t first = 0; first < blocks.size(); first += layout.window_blocks) {
    const size_t start = pos;
    for (size_t i = first; i < std::min(blocks.size(), first + layout.window_blocks); ++i) {
      const size_t lo = size_t{blocks[i]} * B, hi = std::min(n, lo + B);
      for (size_t t = lo; t < hi; ++t) order[pos++] = static_cast<uint32_t>(t);
    }
    Shuffle(order + start, pos - start, rng);
  }
}

Result<std::vector<uint32_t>> WindowBlocks(const StreamLayout& layout, const uint32_t* order, uint64_t window) {
  const size_t WR = layout.window_rows(), B = layout.block_rows;
  const size_t lo = window * WR, hi = std::min(layout.train_rows, lo + WR);
  std::vector<uint32_t> blocks;
  for (size_t i = lo; i < hi; ++i) blocks.push_back(order[i] / static_cast<uint32_t>(B));
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  // With a permutation (CheckResumable checks a checkpoint's), at most W distinct blocks
  // whose sizes add up to the window's rows means the window is exactly those blocks.
  size_t rows = 0;
  for (uint32_t k : blocks) rows += std::min(layout.train_rows, size_t{k} * B + B) - size_t{k} * B;
  if (blocks.size() > layout.window_blocks || rows != hi - lo) {
    return FailedPrecondition("the row order of window " + std::to_string(window) +
                              " is not made of whole blocks (a checkpoint from another [streaming] layout?)");
  }
  return blocks;
}

Status CheckWindowOrder(const StreamLayout& layout, const uint32_t* order) {
  for (uint64_t w = 0; w < layout.windows(); ++w) RETURN_IF_ERROR(WindowBlocks(layout, order, w).status());
  return OkStatus();
}

Result<StreamStart> ReadStreamStart(Backend& backend, RecordTable& table, const Split& split, size_t features,
                                    size_t rows_per_read) {
  const size_t F = features, width = table.width(), ntr = split.train.size(), nva = split.val.size();
  if (width != F + 1 || ntr == 0 || rows_per_read == 0) return Internal("ReadStreamStart: bad arguments");
  rows_per_read = static_cast<size_t>(std::min<uint64_t>(rows_per_read, table.rows()));
  StreamStart out;
  ASSIGN_OR_RETURN(OwnedBuffer records, AllocOwned(backend, rows_per_read * width));
  ASSIGN_OR_RETURN(OwnedBuffer picked, AllocOwned(backend, rows_per_read * width));
  ASSIGN_OR_RETURN(OwnedBuffer x, AllocOwned(backend, rows_per_read * F));
  ASSIGN_OR_RETURN(OwnedBuffer y, AllocOwned(backend, rows_per_read));
  // One pass in row order: sums of (x - shift) and its square in double, the shift being
  // the first training row (numerically safe, unlike raw sums of squares).
  ASSIGN_OR_RETURN(OwnedBuffer shift, AllocOwned(backend, F));
  ASSIGN_OR_RETURN(OwnedBuffer sums, AllocOwned(backend, 4 * F));
  if (nva > 0) {
    ASSIGN_OR_RETURN(out.xva, AllocOwned(backend, nva * F));
    ASSIGN_OR_RETURN(out.yva, AllocOwned(backend, nva));
  }
  std::vector<uint32_t> tidx, vidx;  // this piece's training and validation rows
  size_t ti = 0, vi = 0;
  for (uint64_t first = 0; first < table.rows(); first += rows_per_read) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(rows_per_read, table.rows() - first));
    // The table writes on its own (GPU: its own stream): the last piece's gathers are done first.
    RETURN_IF_ERROR(backend.Synchronize());
    RETURN_IF_ERROR(table.Read(first, n, records.get().data));
    tidx.clear();
    vidx.clear();
    const size_t t0 = ti, v0 = vi;
    for (size_t r = 0; r < n; ++r) {
      const uint64_t row = first + r;
      if (ti < ntr && split.train[ti] == row) {
        tidx.push_back(static_cast<uint32_t>(r));
        ++ti;
      } else if (vi < nva && split.val[vi] == row) {
        vidx.push_back(static_cast<uint32_t>(r));
        ++vi;
      }
    }
    if (!tidx.empty()) {
      const size_t m = tidx.size();
      RETURN_IF_ERROR(backend.GatherRows(records, width, tidx.data(), m, picked));
      RETURN_IF_ERROR(backend.SplitRecords(picked, m, F, x, y));
      if (t0 == 0) RETURN_IF_ERROR(backend.CopyToBytes(shift, 0, x.get().Slice(0, F), F));
      RETURN_IF_ERROR(backend.ShiftedColumnSums(x, m, F, shift, sums));
    }
    if (!vidx.empty()) {
      const size_t m = vidx.size();
      RETURN_IF_ERROR(backend.GatherRows(records, width, vidx.data(), m, picked));
      RETURN_IF_ERROR(
          backend.SplitRecords(picked, m, F, out.xva.get().Slice(v0 * F, m * F), out.yva.get().Slice(v0, m)));
    }
  }
  if (ti != ntr || vi != nva) return Internal("the split names rows the datasets do not have");
  ASSIGN_OR_RETURN(out.mean, AllocOwned(backend, F));
  ASSIGN_OR_RETURN(out.inv_std, AllocOwned(backend, F));
  RETURN_IF_ERROR(backend.MomentsFromShiftedSums(sums, shift, F, ntr, out.mean, out.inv_std));
  if (nva > 0) {
    RETURN_IF_ERROR(backend.Standardize(out.xva, nva, F, out.mean, out.inv_std));
    ASSIGN_OR_RETURN(out.val_labels, LockedArray<float>::Create(nva));
    RETURN_IF_ERROR(backend.Download(out.val_labels.data(), out.yva, nva));
  }
  RETURN_IF_ERROR(backend.Synchronize());
  return out;
}

WindowStream::WindowStream(Backend& backend, RecordTable& table, const Split& split, const StreamLayout& layout,
                           size_t features)
    : backend_(backend), table_(table), split_(split), layout_(layout), features_(features),
      half_rows_(std::min(layout.window_rows(), layout.train_rows)) {}

Result<std::unique_ptr<WindowStream>> WindowStream::Create(Backend& backend, RecordTable& table, const Split& split,
                                                           const StreamLayout& layout, size_t features, Buffer mean,
                                                           Buffer inv_std) {
  if (layout.train_rows != split.train.size() || layout.train_rows == 0 || table.width() != features + 1 ||
      mean.size < features || inv_std.size < features) {
    return Internal("WindowStream: bad arguments");
  }
  std::unique_ptr<WindowStream> s(new WindowStream(backend, table, split, layout, features));
  const size_t WR = s->half_rows_, F = features, B = layout.block_rows;
  ASSIGN_OR_RETURN(s->reader_backend_,
                   MakeBackend(std::string_view(backend.kind()) == "gpu" ? Device::kGpu : Device::kCpu));
  Backend& rb = *s->reader_backend_;
  ASSIGN_OR_RETURN(s->x_, AllocOwned(backend, 2 * WR * F));
  ASSIGN_OR_RETURN(s->y_, AllocOwned(backend, 2 * WR));
  ASSIGN_OR_RETURN(s->mean_, AllocOwned(rb, F));
  ASSIGN_OR_RETURN(s->inv_std_, AllocOwned(rb, F));
  ASSIGN_OR_RETURN(s->sx_, AllocOwned(rb, WR * F));
  ASSIGN_OR_RETURN(s->sy_, AllocOwned(rb, WR));
  ASSIGN_OR_RETURN(s->picked_, AllocOwned(rb, std::min(B, layout.train_rows) * table.width()));
  // A block is read as the contiguous span of table rows from its first to its last
  // training row (the validation rows in between are read and skipped).
  uint64_t span = 0;
  for (size_t k = 0; k < layout.blocks(); ++k) {
    const size_t lo = k * B, hi = std::min(layout.train_rows, lo + B) - 1;
    span = std::max<uint64_t>(span, uint64_t{split.train[hi]} - split.train[lo] + 1);
  }
  ASSIGN_OR_RETURN(s->records_, AllocOwned(rb, span * table.width()));
  // Both backends' memory is plain addresses of one process (CPU) or device (GPU): the
  // training backend copies between them; the reader's buffers are ready once both sync.
  RETURN_IF_ERROR(backend.CopyToBytes(s->mean_, 0, mean, F));
  RETURN_IF_ERROR(backend.CopyToBytes(s->inv_std_, 0, inv_std, F));
  RETURN_IF_ERROR(rb.Synchronize());
  RETURN_IF_ERROR(backend.Synchronize());
  s->slot_of_block_.assign(layout.blocks(), -1);
  s->reader_ = std::thread([p = s.get()] { p->ReaderLoop(); });
  return s;
}

WindowStream::~WindowStream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
}

Status WindowStream::Begin(const uint32_t* order, uint64_t from) {
  const int64_t first = static_cast<int64_t>(from / layout_.window_rows());
  bool staged = false;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stage_ != Stage::kIdle && staged_order_ == order && staged_window_ == first) {
      staged = true;  // prefetched through SetNext: keep it, loading or ready
    } else {
      cv_.wait(lk, [&] { return stage_ != Stage::kLoading; });
      stage_ = Stage::kIdle;  // a window staged for another order is dropped
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (uint32_t k : blocks_of_half_[h]) slot_of_block_[k] = -1;
    blocks_of_half_[h].clear();
    resident_[h] = -1;
  }
  order_ = order;
  next_order_ = nullptr;
  if (!staged && from < layout_.train_rows) return Request(order, static_cast<uint64_t>(first));
  return OkStatus();
}

Status WindowStream::Request(const uint32_t* order, uint64_t window) {
  ASSIGN_OR_RETURN(std::vector<uint32_t> blocks, WindowBlocks(layout_, order, window));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stage_ != Stage::kIdle) return Internal("WindowStream: the reader is busy");
    stage_ = Stage::kLoading;
    staged_window_ = static_cast<int64_t>(window);
    staged_order_ = order;
    staged_blocks_ = std::move(blocks);
  }
  cv_.notify_all();
  return OkStatus();
}

void WindowStream::ReaderLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return quit_ || stage_ == Stage::kLoading; });
    if (quit_) return;
    const std::vector<uint32_t> blocks = staged_blocks_;
    lk.unlock();
    Status st = LoadWindow(blocks);
    lk.lock();
    staged_error_ = st;
    stage_ = st.ok() ? Stage::kReady : Stage::kFailed;
    cv_.notify_all();
  }
}

Status WindowStream::LoadWindow(const std::vector<uint32_t>& blocks) {
  Backend& rb = *reader_backend_;
  const size_t B = layout_.block_rows, F = features_, width = table_.width();
  for (size_t s = 0; s < blocks.size(); ++s) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (quit_) return Interrupted("stream stopped");
    }
    const size_t lo = size_t{blocks[s]} * B, count = std::min(layout_.train_rows, lo + B) - lo;
    const uint64_t first = split_.train[lo], span = uint64_t{split_.train[lo + count - 1]} - first + 1;
    RETURN_IF_ERROR(rb.Synchronize());  // the table writes on its own: the last block's gather is done
    RETURN_IF_ERROR(table_.Read(first, span, records_.get().data));
    pick_idx_.resize(count);
    for (size_t j = 0; j < count; ++j) pick_idx_[j] = static_cast<uint32_t>(split_.train[lo + j] - first);
    const Buffer x = sx_.get().Slice(s * B * F, count * F), y = sy_.get().Slice(s * B, count);
    RETURN_IF_ERROR(rb.GatherRows(records_, width, pick_idx_.data(), count, picked_));
    RETURN_IF_ERROR(rb.SplitRecords(picked_, count, F, x, y));
    RETURN_IF_ERROR(rb.Standardize(x, count, F, mean_, inv_std_));
  }
  return rb.Synchronize();  // the window is complete before the loop may copy it
}

Status WindowStream::MakeResident(uint64_t window) {
  const int h = static_cast<int>(window % 2);
  if (resident_[h] == static_cast<int64_t>(window)) return OkStatus();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return stage_ != Stage::kLoading; });
  if (stage_ == Stage::kReady && (staged_order_ != order_ || staged_window_ != static_cast<int64_t>(window))) {
    stage_ = Stage::kIdle;
  }
  if (stage_ == Stage::kIdle) {  // not asked for yet (only after an unusual access pattern)
    lk.unlock();
    RETURN_IF_ERROR(Request(order_, window));
    lk.lock();
    cv_.wait(lk, [&] { return stage_ != Stage::kLoading; });
  }
  if (stage_ == Stage::kFailed) {
    stage_ = Stage::kIdle;
    return staged_error_;
  }
  const size_t HR = half_rows_, F = features_;
  for (uint32_t k : blocks_of_half_[h]) slot_of_block_[k] = -1;
  // The staged window into its half, slots as staged (B rows apart; a short block leaves a
  // gap that nothing indexes). Synchronized before the reader may overwrite the staging.
  RETURN_IF_ERROR(backend_.CopyToBytes(x_, h * HR * F * sizeof(float), sx_, HR * F));
  RETURN_IF_ERROR(backend_.CopyToBytes(y_, h * HR * sizeof(float), sy_, HR));
  RETURN_IF_ERROR(backend_.Synchronize());
  for (size_t s = 0; s < staged_blocks_.size(); ++s) slot_of_block_[staged_blocks_[s]] = static_cast<int32_t>(s);
  blocks_of_half_[h] = staged_blocks_;
  resident_[h] = static_cast<int64_t>(window);
  stage_ = Stage::kIdle;
  lk.unlock();
  if ((window + 1) * layout_.window_rows() < layout_.train_rows) return Request(order_, window + 1);
  if (next_order_ != nullptr) return Request(next_order_, 0);
  return OkStatus();
}

Status WindowStream::Gather(uint64_t lo, size_t n, Buffer xb, Buffer yb) {
  const size_t WR = layout_.window_rows(), B = layout_.block_rows;
  if (n == 0 || lo + n > layout_.train_rows || order_ == nullptr) return Internal("WindowStream::Gather: bad range");
  const uint64_t w0 = lo / WR, w1 = (lo + n - 1) / WR;
  if (w1 > w0 + 1) return Internal("WindowStream::Gather: a batch spans more than two windows");
  RETURN_IF_ERROR(MakeResident(w0));
  if (w1 != w0) RETURN_IF_ERROR(MakeResident(w1));
  gather_idx_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t pos = lo + i;
    const uint32_t t = order_[pos], k = t / static_cast<uint32_t>(B);
    const int32_t slot = slot_of_block_[k];
    const uint64_t w = pos / WR;
    if (slot < 0 || resident_[w % 2] != static_cast<int64_t>(w)) return Internal("WindowStream: row not resident");
    gather_idx_[i] = static_cast<uint32_t>((w % 2) * half_rows_ + static_cast<size_t>(slot) * B + (t - size_t{k} * B));
  }
  RETURN_IF_ERROR(backend_.GatherRows(x_, features_, gather_idx_.data(), n, xb));
  return backend_.GatherRows(y_, 1, gather_idx_.data(), n, yb);
}

}  // namespace enclave::trainer
