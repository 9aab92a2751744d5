// A deep copy of a checkpoint's state for tests that resume from a saved step
// (TrainState holds locked arrays, which do not copy).
#pragma once

#include <algorithm>

#include "enclave/common/status.h"
#include "enclave/trainer/checkpoint.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer::test_util {

inline Result<TrainState> CloneState(const TrainState& st) {
  TrainState c;
  c.shape = st.shape;
  c.optimizer = st.optimizer;
  c.train_rows = st.train_rows;
  c.val_rows = st.val_rows;
  c.steps_per_epoch = st.steps_per_epoch;
  c.step = st.step;
  c.epoch = st.epoch;
  c.batch = st.batch;
  c.loss_sum = st.loss_sum;
  std::copy(st.shuffle_rng, st.shuffle_rng + 4, c.shuffle_rng);
  c.epochs = st.epochs;
  for (auto [from, to] : {std::pair{&st.mean, &c.mean}, {&st.inv_std, &c.inv_std}, {&st.params, &c.params},
                          {&st.moment1, &c.moment1}, {&st.moment2, &c.moment2}}) {
    ASSIGN_OR_RETURN(*to, from->Clone());
  }
  ASSIGN_OR_RETURN(c.order, st.order.Clone());
  return c;
}

// What on_checkpoint gets: its arrays downloaded from the backend.
inline Result<TrainState> CloneState(const ResidentTrainState& st) { return DownloadTrainState(st); }

}  // namespace enclave::trainer::test_util
