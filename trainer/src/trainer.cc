#include "enclave/trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>
#include <numeric>
#include <string_view>

#include "enclave/crypto/hash.h"
#include "enclave/trainer/checkpoint.h"
#include "enclave/trainer/metrics.h"
#include "enclave/trainer/preprocess.h"
#include "enclave/trainer/rng.h"
#include "enclave/trainer/weights.h"
#include "stream.h"
#include "train_internal.h"

namespace enclave::trainer {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Optimizer {
  OwnedBuffer s1, s2;  // sgd: velocity; adamw: m, v
};

// Regression's targets as the network sees them: (y - mean) / scale.
struct TargetScale {
  float mean = 0, scale = 1;
};

// The training rows' targets' mean and population standard deviation (double, row order).
TargetScale FitTargets(const LockedArray<float>& labels, const LockedArray<uint32_t>& rows) {
  double sum = 0, sq = 0;
  for (uint32_t r : rows) sum += labels[r];
  const double mean = sum / static_cast<double>(rows.size());
  for (uint32_t r : rows) sq += (labels[r] - mean) * (labels[r] - mean);
  const double sd = std::sqrt(sq / static_cast<double>(rows.size()));
  TargetScale t;
  t.mean = static_cast<float>(mean);
  t.scale = sd > 0 && std::isfinite(sd) ? static_cast<float>(sd) : 1.0f;
  return t;
}

// dst = the targets of rows `rows`, scaled as the network sees them.
Status UploadScaledTargets(Backend& backend, const LockedArray<float>& labels, const LockedArray<uint32_t>& rows,
                           const TargetScale& t, Buffer dst) {
  ASSIGN_OR_RETURN(LockedArray<float> y, LockedArray<float>::Create(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) y[i] = (labels[rows[i]] - t.mean) / t.scale;
  return backend.Upload(dst, y.data(), rows.size());
}

// Validation loss, accuracy and AUC (regression: RMSE, MAE, R^2) over the rows of xv / yv.
// With `keep`, the predictions (probabilities; regression: values in the target's units)
// are moved there.
// With row weights `wv` (rows; their sum `wv_sum`), the loss is their weighted mean; the
// other metrics count every row once.
Status Evaluate(Backend& backend, Mlp& model, const Buffer& xv, const Buffer& yv, size_t rows, size_t features,
                const LockedArray<float>& labels, const TargetScale& targets, EpochMetrics* m,
                LockedArray<float>* keep, const Buffer& wv, double wv_sum) {
  if (rows == 0) {
    m->val_loss = m->val_accuracy = m->val_auc = kNaN;
    m->val_rmse = m->val_mae = m->val_r2 = kNaN;
    return OkStatus();
  }
  const ModelShape& shape = model.shape();
  const size_t width = shape.outputs();
  ASSIGN_OR_RETURN(OwnedBuffer probs, AllocOwned(backend, rows * width));
  double loss = 0;
  for (size_t off = 0; off < rows; off += kEvalBatch) {
    const size_t n = std::min(kEvalBatch, rows - off);
    ASSIGN_OR_RETURN(Buffer logits, model.Forward(xv.Slice(off * features, n * features), n));
    double part = 0;
    RETURN_IF_ERROR(backend.LossAndGrad(shape.loss(), logits, yv.Slice(off, n), n, shape.classes, 1.0f, Buffer{}, &part,
                                        wv.empty() ? Buffer{} : wv.Slice(off, n)));
    loss += part;
    RETURN_IF_ERROR(backend.Probabilities(shape.loss(), logits, n, shape.classes, probs.get().Slice(off * width, n * width)));
  }
  ASSIGN_OR_RETURN(LockedArray<float> host, LockedArray<float>::Create(rows * width));
  RETURN_IF_ERROR(backend.Download(host.data(), probs, rows * width));
  m->val_loss = wv.empty() ? loss / static_cast<double>(rows) : wv_sum > 0 ? loss / wv_sum : kNaN;
  if (shape.regression()) {
    for (float& v : host) v = v * targets.scale + targets.mean;  // back to the target's units
  }
  SetValidationMetrics(host.data(), labels.data(), rows, shape.classes, m);
  if (keep != nullptr) *keep = std::move(host);
  return OkStatus();
}

// The trained numbers into the result: downloaded into the host arrays, or (with
// model_stays_on_backend) copied into one backend buffer in the model file's order.
// A stopped run's host result has the parameters only (host_mean false), as always.
Status HandOverModel(Backend& backend, const TrainCallbacks& callbacks, const Mlp& model, Buffer mean, Buffer inv_std,
                     size_t F, TrainResult* result, bool host_mean) {
  const size_t P = model.shape().parameter_count();
  if (callbacks.model_stays_on_backend) {
    ASSIGN_OR_RETURN(result->resident, AllocOwned(backend, 2 * F + P));
    RETURN_IF_ERROR(backend.CopyToBytes(result->resident, 0, mean, F));
    RETURN_IF_ERROR(backend.CopyToBytes(result->resident, sizeof(float) * F, inv_std, F));
    RETURN_IF_ERROR(backend.CopyToBytes(result->resident, sizeof(float) * 2 * F, model.params(), P));
    return backend.Synchronize();
  }
  ASSIGN_OR_RETURN(result->params, model.DownloadParams());
  if (!host_mean) return OkStatus();
  ASSIGN_OR_RETURN(result->mean, LockedArray<float>::Create(F));
  ASSIGN_OR_RETURN(result->inv_std, LockedArray<float>::Create(F));
  RETURN_IF_ERROR(backend.Download(result->mean.data(), mean, F));
  return backend.Download(result->inv_std.data(), inv_std, F);
}

// One optimizer step, layer by layer: weights with the job's l2 and weight decay, biases
// without (as scikit-learn and common practice do: a penalty on the intercept would pull
// the decision boundary towards the origin of the standardized features).
Status Step(Backend& backend, const OptimizerSpec& o, const ModelShape& shape, Mlp& model, const Optimizer& opt,
            float lr, uint64_t step) {
  const double t = static_cast<double>(step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), t));
  for (size_t l = 0; l < shape.layers(); ++l) {
    const size_t w = shape.weight_offset(l), nw = size_t{shape.fan_in(l)} * shape.fan_out(l);
    const size_t b = shape.bias_offset(l), nb = shape.fan_out(l);
    for (int part = 0; part < 2; ++part) {
      const size_t off = part == 0 ? w : b, n = part == 0 ? nw : nb;
      const float wd = part == 0 ? o.weight_decay : 0.0f, l2 = part == 0 ? o.l2 : 0.0f;
      const Buffer p = model.params().Slice(off, n), g = model.grads().Slice(off, n);
      if (o.kind == OptimizerKind::kSgd) {
        RETURN_IF_ERROR(backend.SgdStep(p, g, opt.s1.get().Slice(off, n), n, SgdStepArgs{lr, o.momentum, wd, l2}));
      } else {
        AdamWStepArgs a{lr, o.beta1, o.beta2, o.eps, wd, l2, bc1, bc2};
        RETURN_IF_ERROR(backend.AdamWStep(p, g, opt.s1.get().Slice(off, n), opt.s2.get().Slice(off, n), n, a));
      }
    }
  }
  return OkStatus();
}

// A checkpoint's state must fit this run exactly before any of it is used.
Status CheckResumable(const TrainState& st, const JobSpec& job, const ModelShape& shape, size_t ntr, size_t nva,
                      uint64_t steps_per_epoch) {
  const size_t P = shape.parameter_count(), F = shape.inputs;
  const bool adam = job.optimizer.kind == OptimizerKind::kAdamW;
  auto refuse = [](const std::string& what) { return FailedPrecondition("cannot resume: the checkpoint's " + what + " does not match this job and data"); };
  if (st.shape.inputs != shape.inputs || st.shape.hidden != shape.hidden || st.shape.classes != shape.classes ||
      st.shape.activation != shape.activation) {
    return refuse("model shape");
  }
  if (st.optimizer != job.optimizer.kind) return refuse("optimizer");
  if (st.train_rows != ntr || st.val_rows != nva || st.steps_per_epoch != steps_per_epoch) return refuse("split");
  if (st.order.size() != ntr || st.mean.size() != F || st.inv_std.size() != F || st.params.size() != P ||
      st.moment1.size() != P || st.moment2.size() != (adam ? P : 0)) {
    return refuse("array sizes");
  }
  if (st.epoch < 1 || st.epoch > job.epochs || st.batch > steps_per_epoch ||
      st.step != (uint64_t{st.epoch} - 1) * steps_per_epoch + st.batch || st.epochs.size() != st.epoch - 1) {
    return refuse("position (epoch, step)");
  }
  std::vector<bool> seen(ntr, false);
  for (uint32_t r : st.order) {
    if (r >= ntr || seen[r]) return refuse("row order");
    seen[r] = true;
  }
  return OkStatus();
}

// What must be equal on every rank before a distributed run's first step: the position,
// the split, the standardization (the same data), the row order and shuffle stream, the
// parameters and optimizer moments (the same checkpoint, or the same initialization).
// Hashed in place (streaming): the parameters are not copied out of locked memory.
crypto::Digest256 StartFingerprint(const TrainState& st) {
  crypto::Sha256Hasher h;
  auto put = [&h](const void* p, size_t n) { h.Update({static_cast<const uint8_t*>(p), n}); };
  for (uint64_t v : {st.step, st.train_rows, st.val_rows, uint64_t{st.epoch}, st.batch}) put(&v, sizeof(v));
  put(st.shuffle_rng, sizeof(st.shuffle_rng));
  put(st.order.data(), st.order.size() * sizeof(uint32_t));
  for (const LockedArray<float>* a : {&st.mean, &st.inv_std, &st.params, &st.moment1, &st.moment2}) {
    put(a->data(), a->size() * sizeof(float));
  }
  return h.Final();
}

// Every rank learns every rank's (step, fingerprint) through one sum: rank r fills only
// its own slots. Refuses to train unless all equal rank 0's.
Status CheckRanksAgree(Collective& c, uint64_t step, const crypto::Digest256& fingerprint) {
  constexpr size_t kSlots = 5;  // step, then 64 bits of the fingerprint as four 16-bit parts
  const size_t n = static_cast<size_t>(c.world_size()), r = static_cast<size_t>(c.rank());
  std::vector<double> all(n * kSlots, 0.0);
  all[r * kSlots] = static_cast<double>(step);
  for (size_t i = 0; i < 4; ++i) all[r * kSlots + 1 + i] = fingerprint[2 * i] * 256.0 + fingerprint[2 * i + 1];
  RETURN_IF_ERROR(c.AllReduceSum(all.data(), all.size()).Annotate("comparing the ranks' starting state"));
  for (size_t k = 1; k < n; ++k) {
    if (!std::equal(all.begin() + static_cast<long>(k * kSlots), all.begin() + static_cast<long>((k + 1) * kSlots),
                    all.begin())) {
      return FailedPrecondition("rank " + std::to_string(k) + " starts at step " +
                                std::to_string(static_cast<uint64_t>(all[k * kSlots])) + " and rank 0 at step " +
                                std::to_string(static_cast<uint64_t>(all[0])) +
                                (all[k * kSlots] == all[0] ? " with other data, parameters or optimizer state" : "") +
                                ": every rank must start from the same state (resume all from the same checkpoint step)");
    }
  }
  return OkStatus();
}

}  // namespace

// The model's inputs of data rows `rows` into dst (rows x the plan's width): the raw
// features gathered, or (a plan that is not the identity; CPU backend, whose buffers are
// host memory) fitted on these rows when `fit`, then applied.
Status GatherInputs(Backend& backend, const LoadedData& data, const LockedArray<uint32_t>& rows, Preprocessing* prep,
                    bool fit, Buffer dst) {
  const size_t F = data.features, n = rows.size();
  if (prep->identity()) return backend.GatherRows(data.x, F, rows.data(), n, dst);
  ASSIGN_OR_RETURN(LockedArray<float> raw, LockedArray<float>::Create(n * F));
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(raw.data() + i * F, data.x.get().data + size_t{rows[i]} * F, F * sizeof(float));
  }
  if (fit) {
    ASSIGN_OR_RETURN(LockedArray<uint32_t> all, LockedArray<uint32_t>::Create(n));
    std::iota(all.begin(), all.end(), 0u);
    RETURN_IF_ERROR(FitPreprocessing(prep, raw.data(), F, all.data(), n));
  }
  return ApplyPreprocessing(*prep, raw.data(), n, dst.data);
}

void SetValidationMetrics(const float* pred, const float* labels, size_t rows, uint32_t classes, EpochMetrics* m) {
  m->val_accuracy = m->val_auc = m->val_rmse = m->val_mae = m->val_r2 = kNaN;
  if (classes == 0) {
    const RegressionErrors e = RegressionErrorsOf(pred, labels, rows);
    m->val_rmse = e.rmse;
    m->val_mae = e.mae;
    m->val_r2 = e.r2;
  } else {
    m->val_accuracy = Accuracy(pred, labels, rows, classes);
    m->val_auc = RocAuc(pred, labels, rows, classes);
  }
}

Result<TrainResult> Train(Backend& backend, const JobSpec& job, const LoadedData& data, const Split& split,
                          const TrainCallbacks& callbacks, const TrainState* resume, Collective* collective) {
  if (job.family == ModelFamily::kXgboost) {
    if (resume != nullptr) return Unsupported("trees have no checkpoints to resume from");
    if (collective != nullptr && collective->world_size() > 1) {
      return Unsupported("trees train in one process (no distributed XGBoost in this build)");
    }
    return TrainTreesJob(backend, job, data, split, callbacks);
  }
  // The model's inputs: the raw features, or (categorical columns, missing values) the
  // preprocessed row, fitted below on the training rows.
  Preprocessing prep = PlanPreprocessing(data.schema, job.preprocess);
  if (!prep.identity() && data.features != prep.raw_features()) return Internal("preprocessing plan and data disagree");
  const size_t F = prep.inputs();
  const size_t ntr = split.train.size(), nva = split.val.size();
  const bool regression = data.classes == 0;
  TargetScale targets;
  if (ntr == 0) return InvalidInput("no training rows");
  for (const LockedArray<uint32_t>* idx : {&split.train, &split.val}) {
    for (uint32_t r : *idx) {
      if (r >= data.rows) return Internal("split row out of range");
    }
  }

  const bool streamed = data.table != nullptr;
  const size_t batch = std::min<size_t>(job.batch_size, ntr);
  StreamLayout layout{ntr, job.streaming.block_rows, job.streaming.window_blocks};
  if (streamed && layout.window_rows() < batch) {
    return InvalidInput("[streaming]: a window (" + std::to_string(layout.window_rows()) +
                        " rows) must hold at least one batch (" + std::to_string(batch) + " rows)");
  }

  // The training and validation tables, gathered once (or, streamed, the validation rows
  // and a window stream); standardization from training rows only.
  OwnedBuffer xtr, ytr, xva, yva;
  LockedArray<float> val_labels;
  // Row weights (job.weights; loaded data only): per training and validation row, and sums.
  OwnedBuffer wtr, wva;
  std::vector<double> class_weights;
  double train_weight = 0, val_weight = 0;
  ASSIGN_OR_RETURN(OwnedBuffer mean, AllocOwned(backend, F));
  ASSIGN_OR_RETURN(OwnedBuffer inv_std, AllocOwned(backend, F));
  std::unique_ptr<WindowStream> stream;
  if (streamed) {
    ASSIGN_OR_RETURN(StreamStart start, ReadStreamStart(backend, *data.table, split, F, layout.block_rows));
    xva = std::move(start.xva);
    yva = std::move(start.yva);
    val_labels = std::move(start.val_labels);
    mean = std::move(start.mean);
    inv_std = std::move(start.inv_std);
    ASSIGN_OR_RETURN(stream, WindowStream::Create(backend, *data.table, split, layout, F, mean, inv_std));
  } else {
    if ((!prep.identity() || regression) && std::string_view(backend.kind()) != "cpu") {
      return Unsupported("categorical columns, missing values and regression train on the CPU backend only");
    }
    ASSIGN_OR_RETURN(xtr, AllocOwned(backend, ntr * F));
    ASSIGN_OR_RETURN(ytr, AllocOwned(backend, ntr));
    RETURN_IF_ERROR(GatherInputs(backend, data, split.train, &prep, /*fit=*/true, xtr));
    if (regression) {
      targets = FitTargets(data.labels, split.train);
      RETURN_IF_ERROR(UploadScaledTargets(backend, data.labels, split.train, targets, ytr));
    } else {
      RETURN_IF_ERROR(backend.GatherRows(data.y, 1, split.train.data(), ntr, ytr));
    }
    if (nva > 0) {
      ASSIGN_OR_RETURN(xva, AllocOwned(backend, nva * F));
      ASSIGN_OR_RETURN(yva, AllocOwned(backend, nva));
      RETURN_IF_ERROR(GatherInputs(backend, data, split.val, &prep, /*fit=*/false, xva));
      if (regression) {
        RETURN_IF_ERROR(UploadScaledTargets(backend, data.labels, split.val, targets, yva));
      } else {
        RETURN_IF_ERROR(backend.GatherRows(data.y, 1, split.val.data(), nva, yva));
      }
      ASSIGN_OR_RETURN(val_labels, LockedArray<float>::Create(nva));
      for (size_t i = 0; i < nva; ++i) val_labels[i] = data.labels[split.val[i]];
    }
    if (job.weights.any()) {
      ASSIGN_OR_RETURN(class_weights, ClassWeightsFor(job.weights, data, split.train));
      ASSIGN_OR_RETURN(LockedArray<float> w, RowWeights(class_weights, data, split.train));
      for (float v : w) train_weight += v;
      if (!(train_weight > 0)) return InvalidInput("every training row has weight 0 (training.class_weight, sample_weight_column)");
      ASSIGN_OR_RETURN(wtr, AllocOwned(backend, ntr));
      RETURN_IF_ERROR(backend.Upload(wtr, w.data(), ntr));
      if (nva > 0) {
        ASSIGN_OR_RETURN(LockedArray<float> v, RowWeights(class_weights, data, split.val));
        for (float x : v) val_weight += x;
        ASSIGN_OR_RETURN(wva, AllocOwned(backend, nva));
        RETURN_IF_ERROR(backend.Upload(wva, v.data(), nva));
      }
    }
    RETURN_IF_ERROR(backend.ColumnMoments(xtr, ntr, F, mean, inv_std));
    RETURN_IF_ERROR(backend.Standardize(xtr, ntr, F, mean, inv_std));
    if (nva > 0) RETURN_IF_ERROR(backend.Standardize(xva, nva, F, mean, inv_std));
  }

  ModelShape shape;
  shape.inputs = static_cast<uint32_t>(F);
  shape.hidden = job.model.hidden;
  shape.classes = data.classes;
  shape.activation = job.model.activation;
  // Refuse what cannot fit before allocating: 2^28 parameters, 2^30 activation floats.
  size_t units = 0;
  for (size_t l = 0; l < shape.layers(); ++l) units += shape.fan_out(l);
  if (shape.parameter_count() > (size_t{1} << 28) || std::max(batch, kEvalBatch) * units > (size_t{1} << 30)) {
    return InvalidInput("model too large: " + std::to_string(shape.parameter_count()) + " parameters, " +
                        std::to_string(units) + " units per row (at most 2^28 parameters and 2^30 activations)");
  }
  if (callbacks.on_checkpoint) {  // before the first step, not at the first checkpoint
    RETURN_IF_ERROR(CheckpointsFit(shape, ntr, job.optimizer.kind == OptimizerKind::kAdamW, job.epochs));
  }
  ASSIGN_OR_RETURN(Mlp model, Mlp::Create(backend, shape, std::max(batch, kEvalBatch), job.seed));
  const size_t P = shape.parameter_count();

  Optimizer opt;
  ASSIGN_OR_RETURN(opt.s1, AllocOwned(backend, P));
  if (job.optimizer.kind == OptimizerKind::kAdamW) {
    ASSIGN_OR_RETURN(opt.s2, AllocOwned(backend, P));
  }

  const uint64_t steps_per_epoch = (ntr + batch - 1) / batch;
  kernels::LrSchedule sched{};
  sched.kind = job.schedule.kind;
  sched.base_lr = job.optimizer.lr;
  sched.min_lr = job.schedule.min_lr;
  sched.gamma = job.schedule.gamma;
  sched.step_size = static_cast<long>(job.schedule.step_epochs * steps_per_epoch);
  sched.warmup_steps = static_cast<long>(job.schedule.warmup_epochs * steps_per_epoch);
  sched.total_steps = static_cast<long>(job.epochs * steps_per_epoch);

  const size_t world = collective != nullptr ? static_cast<size_t>(collective->world_size()) : 1;
  const size_t rank = collective != nullptr ? static_cast<size_t>(collective->rank()) : 0;
  // Distributed: the step's gradients and one stop vote travel in one host buffer.
  LockedArray<float> exchange;
  if (world > 1) {
    ASSIGN_OR_RETURN(exchange, LockedArray<float>::Create(P + 1));
  }
  ASSIGN_OR_RETURN(OwnedBuffer xb, AllocOwned(backend, batch * F));
  ASSIGN_OR_RETURN(OwnedBuffer yb, AllocOwned(backend, batch));
  OwnedBuffer wb;
  if (!wtr.get().empty()) {
    ASSIGN_OR_RETURN(wb, AllocOwned(backend, batch));
  }
  ASSIGN_OR_RETURN(LockedArray<uint32_t> order, LockedArray<uint32_t>::Create(ntr));
  std::iota(order.begin(), order.end(), 0u);
  Rng shuffle(job.seed, kStreamShuffle);
  auto shuffle_epoch = [&] {
    if (streamed) {
      WindowShuffle(layout, shuffle, order.data());
    } else {
      Shuffle(order.data(), ntr, shuffle);
    }
  };
  // Streamed: the next epoch's order is drawn ahead from a copy of the shuffle stream, so
  // the reader can stage its first window during this epoch (the stream and the order that
  // checkpoints see advance only when the epoch ends, as in a loaded run).
  LockedArray<uint32_t> next_order;
  Rng next_shuffle = shuffle;
  if (streamed) {
    ASSIGN_OR_RETURN(next_order, LockedArray<uint32_t>::Create(ntr));
  }

  TrainResult result;
  result.shape = shape;
  result.preprocessing = prep;
  result.label_mean = targets.mean;
  result.label_scale = targets.scale;
  result.class_weights = class_weights;
  result.train_rows = ntr;
  result.val_rows = nva;
  uint64_t step = 0;
  uint32_t first_epoch = 1;
  uint64_t first_batch = 0;
  double resumed_loss = 0;
  if (resume != nullptr) {
    RETURN_IF_ERROR(CheckResumable(*resume, job, shape, ntr, nva, steps_per_epoch));
    if (streamed) RETURN_IF_ERROR(CheckWindowOrder(layout, resume->order.data()));
    // The standardization is recomputed from the same rows: equal bits, or the data changed.
    ASSIGN_OR_RETURN(LockedArray<float> mh, LockedArray<float>::Create(F));
    ASSIGN_OR_RETURN(LockedArray<float> sh, LockedArray<float>::Create(F));
    RETURN_IF_ERROR(backend.Download(mh.data(), mean, F));
    RETURN_IF_ERROR(backend.Download(sh.data(), inv_std, F));
    if (std::memcmp(mh.data(), resume->mean.data(), F * sizeof(float)) != 0 ||
        std::memcmp(sh.data(), resume->inv_std.data(), F * sizeof(float)) != 0) {
      return FailedPrecondition("cannot resume: the training rows differ from the checkpoint's (standardization differs)");
    }
    RETURN_IF_ERROR(model.UploadParams(resume->params.data(), P));
    RETURN_IF_ERROR(backend.Upload(opt.s1, resume->moment1.data(), P));
    if (!opt.s2.get().empty()) RETURN_IF_ERROR(backend.Upload(opt.s2, resume->moment2.data(), P));
    std::copy(resume->order.begin(), resume->order.end(), order.begin());
    shuffle.SetState(resume->shuffle_rng);
    step = resume->step;
    first_epoch = resume->epoch;
    first_batch = resume->batch;
    resumed_loss = resume->loss_sum;
    result.epochs = resume->epochs;
    result.resumed_epoch = resume->epoch;
    result.resumed_step = resume->step;
  }

  // The state after a step, its arrays left where they are (a checkpoint seals them there).
  auto capture_resident = [&](uint32_t epoch, uint64_t b, double loss_sum) -> Result<ResidentTrainState> {
    ResidentTrainState rs;
    rs.backend = &backend;
    TrainState& st = rs.host;
    st.shape = shape;
    st.optimizer = job.optimizer.kind;
    st.train_rows = ntr;
    st.val_rows = nva;
    st.steps_per_epoch = steps_per_epoch;
    st.step = step;
    st.epoch = epoch;
    st.batch = b;
    st.loss_sum = loss_sum;
    shuffle.GetState(st.shuffle_rng);
    ASSIGN_OR_RETURN(st.order, order.Clone());
    st.epochs = result.epochs;
    rs.mean = mean;
    rs.inv_std = inv_std;
    rs.params = model.params();
    rs.moment1 = opt.s1;
    rs.moment2 = opt.s2;
    return rs;
  };
  // The same with its arrays downloaded (the ranks' start fingerprint).
  auto capture = [&](uint32_t epoch, uint64_t b, double loss_sum) -> Result<TrainState> {
    ASSIGN_OR_RETURN(const ResidentTrainState rs, capture_resident(epoch, b, loss_sum));
    return DownloadTrainState(rs);
  };

  // The first epoch's order (a resumed one was restored with its shuffle stream).
  if (resume == nullptr) shuffle_epoch();
  if (streamed) RETURN_IF_ERROR(stream->Begin(order.data(), std::min<uint64_t>(first_batch * batch, ntr)));

  if (world > 1) {
    ASSIGN_OR_RETURN(TrainState start, capture(first_epoch, first_batch, 0.0));
    RETURN_IF_ERROR(CheckRanksAgree(*collective, step, StartFingerprint(start)));
  }

  // Early stopping (job.early_stopping_patience): the best epoch so far, by validation loss.
  const uint32_t patience = nva > 0 ? job.early_stopping_patience : 0;
  struct {
    uint32_t epoch = 0;
    double loss = 0;
    OwnedBuffer params;
  } best;
  if (patience > 0) {
    // A checkpoint does not hold the best epoch (an interrupted run's stop checkpoint is
    // written, but cannot be resumed with early stopping).
    if (callbacks.checkpoint_every > 0 || resume != nullptr) {
      return Unsupported("early stopping does not go together with checkpoints yet (they do not keep the best epoch)");
    }
    ASSIGN_OR_RETURN(best.params, AllocOwned(backend, P));
  }
  for (uint32_t epoch = first_epoch; epoch <= job.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool resuming = resume != nullptr && epoch == first_epoch;
    if (streamed && epoch < job.epochs) {
      next_shuffle = shuffle;
      WindowShuffle(layout, next_shuffle, next_order.data());
      stream->SetNext(next_order.data());
    }
    double loss_sum = resuming ? resumed_loss : 0;
    float lr = 0;
    for (uint64_t b = resuming ? first_batch : 0; b < steps_per_epoch; ++b) {
      const size_t off = b * batch, n = std::min(batch, ntr - off);
      // This rank's share of the global batch (all of it in a single process).
      const size_t lo = off + ShardBegin(n, rank, world), mine = off + ShardBegin(n, rank + 1, world) - lo;
      double part = 0;
      if (mine > 0) {
        if (streamed) {
          RETURN_IF_ERROR(stream->Gather(lo, mine, xb, yb));
        } else {
          RETURN_IF_ERROR(backend.GatherRows(xtr, F, order.data() + lo, mine, xb));
          RETURN_IF_ERROR(backend.GatherRows(ytr, 1, order.data() + lo, mine, yb));
          if (!wb.get().empty()) RETURN_IF_ERROR(backend.GatherRows(wtr, 1, order.data() + lo, mine, wb));
        }
        RETURN_IF_ERROR(model.Forward(xb, mine).status());
        RETURN_IF_ERROR(model.Backward(xb, yb.get().Slice(0, mine), mine, &part, n,
                                       wb.get().empty() ? Buffer{} : wb.get().Slice(0, mine)));
      } else {
        RETURN_IF_ERROR(backend.Fill(model.grads(), 0.0f));
      }
      loss_sum += part;
      bool stop = callbacks.should_stop && callbacks.should_stop(step + 1);
      if (world > 1) {
        RETURN_IF_ERROR(backend.Download(exchange.data(), model.grads(), P));
        exchange[P] = stop ? 1.0f : 0.0f;
        RETURN_IF_ERROR(collective->AllReduceSum(exchange.data(), P + 1).Annotate("step " + std::to_string(step + 1)));
        RETURN_IF_ERROR(backend.Upload(model.grads(), exchange.data(), P));
        if (!stop && exchange[P] > 0.0f) {
          stop = true;
          result.stopped_by_peer = true;
        }
      }
      lr = kernels::ScheduledLr(sched, static_cast<long>(step));
      ++step;  // 1-based in Step (Adam's bias correction)
      RETURN_IF_ERROR(Step(backend, job.optimizer, shape, model, opt, lr, step));
      if (callbacks.on_step) callbacks.on_step(b + 1, steps_per_epoch);
      const bool due = callbacks.checkpoint_every > 0 && step % callbacks.checkpoint_every == 0;
      if (callbacks.on_checkpoint && (due || stop)) {
        ASSIGN_OR_RETURN(const ResidentTrainState st, capture_resident(epoch, b + 1, loss_sum));
        RETURN_IF_ERROR(callbacks.on_checkpoint(st));
      }
      if (stop) {
        result.stopped = true;
        result.steps = step;
        RETURN_IF_ERROR(HandOverModel(backend, callbacks, model, mean, inv_std, F, &result, /*host_mean=*/false));
        return result;
      }
    }
    // The next epoch's order (drawn before this epoch's evaluation: the shuffle stream's
    // sequence does not depend on when it is drawn).
    if (epoch < job.epochs) {
      if (streamed) {
        std::swap(order, next_order);
        shuffle = next_shuffle;
        RETURN_IF_ERROR(stream->Begin(order.data(), 0));
      } else {
        shuffle_epoch();
      }
    }
    // The learning rate of the epoch's last step (recomputed: a resumed epoch may have run none).
    lr = kernels::ScheduledLr(sched, static_cast<long>(step) - 1);
    EpochMetrics m;
    m.epoch = epoch;
    m.lr = lr;
    if (world > 1) RETURN_IF_ERROR(collective->AllReduceSum(&loss_sum, 1).Annotate("epoch " + std::to_string(epoch)));
    m.train_loss = loss_sum / (wtr.get().empty() ? static_cast<double>(ntr) : train_weight);
    if (!std::isfinite(m.train_loss)) {
      return InvalidInput("training diverged at epoch " + std::to_string(epoch) + " (loss is not finite): lower optimizer.lr");
    }
    LockedArray<float> predictions;
    RETURN_IF_ERROR(Evaluate(backend, model, xva, yva, nva, F, val_labels, targets, &m, &predictions, wva, val_weight));
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.epochs.push_back(m);
    if (callbacks.on_epoch) callbacks.on_epoch(m);
    if (patience == 0) {
      if (epoch == job.epochs) result.val_predictions = std::move(predictions);
      continue;
    }
    // Early stopping: the best epoch's parameters and predictions are kept aside.
    if (best.epoch == 0 || m.val_loss < best.loss) {
      best.epoch = epoch;
      best.loss = m.val_loss;
      RETURN_IF_ERROR(backend.CopyToBytes(best.params, 0, model.params(), P));
      result.val_predictions = std::move(predictions);
    } else if (epoch - best.epoch >= patience) {
      break;
    }
  }
  if (patience > 0 && best.epoch != result.epochs.back().epoch) {
    RETURN_IF_ERROR(model.CopyParams(best.params));
    result.best_epoch = best.epoch;
  }
  result.steps = step;
  RETURN_IF_ERROR(HandOverModel(backend, callbacks, model, mean, inv_std, F, &result, /*host_mean=*/true));
  return result;
}

Result<CvResult> CrossValidate(Backend& backend, const JobSpec& job, const LoadedData& data, uint32_t folds,
                               const TrainCallbacks& callbacks, const std::function<void(uint32_t, uint32_t)>& on_fold) {
  ASSIGN_OR_RETURN(std::vector<Split> splits, StratifiedKFold(data.labels, data.classes, folds, job.seed));
  CvResult cv;
  cv.width = data.classes > 2 ? data.classes : 1;
  ASSIGN_OR_RETURN(cv.out_of_fold, LockedArray<float>::Create(data.rows * cv.width));
  double acc = 0, auc = 0, rmse = 0, r2 = 0;
  for (uint32_t f = 0; f < folds; ++f) {
    if (on_fold) on_fold(f + 1, folds);
    ASSIGN_OR_RETURN(TrainResult r, Train(backend, job, data, splits[f], callbacks));
    if (r.stopped) return Interrupted("cross-validation stopped in fold " + std::to_string(f + 1));
    const EpochMetrics& last = r.Final();
    acc += last.val_accuracy;
    auc += last.val_auc;
    rmse += last.val_rmse;
    r2 += last.val_r2;
    // Every row is in exactly one fold's validation rows: its prediction by that fold's model.
    const LockedArray<uint32_t>& val = splits[f].val;
    if (r.val_predictions.size() != val.size() * cv.width) return Internal("fold predictions do not match its rows");
    for (size_t i = 0; i < val.size(); ++i) {
      std::copy(r.val_predictions.data() + i * cv.width, r.val_predictions.data() + (i + 1) * cv.width,
                cv.out_of_fold.data() + size_t{val[i]} * cv.width);
    }
    cv.folds.push_back(std::move(r));
  }
  cv.mean_accuracy = acc / folds;
  cv.mean_auc = auc / folds;
  cv.mean_rmse = rmse / folds;
  cv.mean_r2 = r2 / folds;
  return cv;
}

}  // namespace enclave::trainer
