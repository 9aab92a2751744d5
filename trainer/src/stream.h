// Streaming training data (JobSpec::streaming, docs/training.md "Streaming"): instead of
// holding every training row, the loop holds two windows of blocks and a reader thread
// authenticates, decrypts, checks and standardizes the next window while the current one
// trains. The epoch's row order is drawn so that each window is a set of whole blocks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/locked.h"
#include "enclave/trainer/rng.h"

namespace enclave::trainer {

// Block k holds the training rows (indices into split.train) [k * block_rows, ...), at most
// block_rows of them; window w holds the rows at order positions [w * window_rows(), ...).
struct StreamLayout {
  size_t train_rows = 0, block_rows = 1, window_blocks = 1;
  size_t window_rows() const { return block_rows * window_blocks; }
  size_t blocks() const { return (train_rows + block_rows - 1) / block_rows; }
  size_t windows() const { return (train_rows + window_rows() - 1) / window_rows(); }
};

// One epoch's order: the full blocks permuted with `rng`, the short last block (if any)
// after them; cut into windows of window_blocks blocks; the rows of each window, listed
// block after block in that permuted order, then shuffled with `rng` (Fisher-Yates).
// order has layout.train_rows entries.
void WindowShuffle(const StreamLayout& layout, Rng& rng, uint32_t* order);

// The blocks (ascending) of window `window` of `order`, which must be exactly their rows
// (else kFailedPrecondition); CheckWindowOrder checks every window of an order.
Result<std::vector<uint32_t>> WindowBlocks(const StreamLayout& layout, const uint32_t* order, uint64_t window);
Status CheckWindowOrder(const StreamLayout& layout, const uint32_t* order);

// The training split's standardization (mean and 1/std per feature, from the training
// rows only, in row order) and the validation rows, from one pass over the table, all in
// backend memory (on the GPU backend no record, row or moment reaches the host; the
// validation labels, class indices, come back for the metrics). `table` writes into
// `backend`'s memory (a table opened for that backend: OpenDatasetsForStreaming).
struct StreamStart {
  OwnedBuffer mean, inv_std;         // features
  OwnedBuffer xva, yva;              // validation rows, standardized
  LockedArray<float> val_labels;
};
Result<StreamStart> ReadStreamStart(Backend& backend, RecordTable& table, const Split& split, size_t features,
                                    size_t rows_per_read);

class WindowStream {
 public:
  // mean and inv_std (features floats, `backend`'s memory) are copied. The reader thread
  // works on a backend of its own of the same kind (a backend is not thread-safe), which
  // `table` must write into: on the GPU, device memory.
  static Result<std::unique_ptr<WindowStream>> Create(Backend& backend, RecordTable& table, const Split& split,
                                                      const StreamLayout& layout, size_t features, Buffer mean,
                                                      Buffer inv_std);
  ~WindowStream();  // stops the reader thread
  WindowStream(const WindowStream&) = delete;
  WindowStream& operator=(const WindowStream&) = delete;

  // A new order (a new epoch, or a resumed one): forgets the resident windows and starts
  // reading the window that holds order position `from` (unless it is already staged: see
  // SetNext). `order` must stay unchanged until the next Begin; each of its windows must be
  // whole blocks (WindowShuffle's).
  Status Begin(const uint32_t* order, uint64_t from);
  // The order that will follow this one (the next epoch's): once the last window of this
  // order is resident, the reader stages window 0 of `next`, so an epoch boundary does not
  // wait for the reader. `next` must stay unchanged until it is begun.
  void SetNext(const uint32_t* next) { next_order_ = next; }
  // xb = the standardized features of rows order[lo, lo + n), yb = their labels. Waits for
  // the reader when the window is not resident yet.
  Status Gather(uint64_t lo, size_t n, Buffer xb, Buffer yb);


 private:
  WindowStream(Backend& backend, RecordTable& table, const Split& split, const StreamLayout& layout,
               size_t features);
  Status Request(const uint32_t* order, uint64_t window);  // hands a window of `order` to the reader
  Status MakeResident(uint64_t window);      // waits for it, uploads it into its half
  void ReaderLoop();
  Status LoadWindow(const std::vector<uint32_t>& blocks);  // reader thread: into the staging arrays

  Backend& backend_;
  // The reader thread's backend: declared before the buffers it owns (freed after them).
  std::unique_ptr<Backend> reader_backend_;
  RecordTable& table_;
  const Split& split_;
  StreamLayout layout_;
  size_t features_;
  size_t half_rows_;  // rows per half: a window, or all training rows when fewer

  const uint32_t* order_ = nullptr;
  const uint32_t* next_order_ = nullptr;
  OwnedBuffer x_, y_;                  // two halves of window_rows rows each
  int64_t resident_[2] = {-1, -1};     // the window in each half
  std::vector<int32_t> slot_of_block_; // resident blocks: their slot in their half, else -1
  std::vector<uint32_t> blocks_of_half_[2];
  std::vector<uint32_t> gather_idx_;

  // Reader thread and its single staging window.
  std::mutex mu_;
  std::condition_variable cv_;
  enum class Stage { kIdle, kLoading, kReady, kFailed } stage_ = Stage::kIdle;
  int64_t staged_window_ = -1;
  const uint32_t* staged_order_ = nullptr;
  std::vector<uint32_t> staged_blocks_;  // ascending
  Status staged_error_;
  bool quit_ = false;
  // In the reader's backend memory.
  OwnedBuffer mean_, inv_std_;
  OwnedBuffer records_;                // one block's span of records
  OwnedBuffer picked_;                 // one block's training records
  std::vector<uint32_t> pick_idx_;
  OwnedBuffer sx_, sy_;                // the staged window, standardized (slots B rows apart)
  std::thread reader_;
};

}  // namespace enclave::trainer
