// [model] family = "xgboost": the loaded rows, preprocessed (categories one-hot, missing
// values kept for the trees to route), trained by XGBoost (trees.h) one boosting round per
// "epoch" of the outputs.
#include <cmath>
#include <limits>
#include <string_view>

#include "enclave/trainer/trees.h"
#include "enclave/trainer/weights.h"
#include "train_internal.h"

namespace enclave::trainer {

Result<TrainResult> TrainTreesJob(Backend& backend, const JobSpec& job, const LoadedData& data, const Split& split,
                                  const TrainCallbacks& callbacks) {
  if (std::string_view(backend.kind()) != "cpu") return Unsupported("trees train on the CPU backend (device = \"cpu\")");
  if (data.table != nullptr) return Unsupported("trees train on loaded data, not [streaming]");
  const size_t ntr = split.train.size(), nva = split.val.size();
  if (ntr == 0) return InvalidInput("no training rows");
  Preprocessing prep = PlanPreprocessing(data.schema, {Impute::kKeepMissing, false});
  const size_t F = prep.inputs();
  ASSIGN_OR_RETURN(LockedArray<float> xtr, LockedArray<float>::Create(ntr * F));
  ASSIGN_OR_RETURN(LockedArray<float> xva, LockedArray<float>::Create(nva * F));
  ASSIGN_OR_RETURN(LockedArray<float> ytr, LockedArray<float>::Create(ntr));
  ASSIGN_OR_RETURN(LockedArray<float> yva, LockedArray<float>::Create(nva));
  RETURN_IF_ERROR(GatherInputs(backend, data, split.train, &prep, /*fit=*/true, Buffer{xtr.data(), xtr.size()}));
  if (nva > 0) RETURN_IF_ERROR(GatherInputs(backend, data, split.val, &prep, false, Buffer{xva.data(), xva.size()}));
  for (size_t i = 0; i < ntr; ++i) ytr[i] = data.labels[split.train[i]];
  for (size_t i = 0; i < nva; ++i) yva[i] = data.labels[split.val[i]];

  const TreeTask task = data.classes == 0 ? TreeTask::kRegression
                        : data.classes == 2 ? TreeTask::kBinary
                                            : TreeTask::kMulticlass;
  // [training] weights: per training and validation row (weights.h).
  LockedArray<float> wtr, wva;
  std::vector<double> class_weights;
  if (job.weights.any()) {
    ASSIGN_OR_RETURN(class_weights, ClassWeightsFor(job.weights, data, split.train));
    ASSIGN_OR_RETURN(wtr, RowWeights(class_weights, data, split.train));
    ASSIGN_OR_RETURN(wva, RowWeights(class_weights, data, split.val));
  }
  TreeTrainInput in;
  in.x = xtr.data();
  in.y = ytr.data();
  in.rows = ntr;
  in.features = F;
  in.weights = wtr.empty() ? nullptr : wtr.data();
  if (nva > 0) {
    in.x_val = xva.data();
    in.y_val = yva.data();
    in.val_rows = nva;
    in.weights_val = wva.empty() ? nullptr : wva.data();
  }
  TrainResult result;
  result.family = ModelFamily::kXgboost;
  result.trees_spec = job.trees;
  result.preprocessing = prep;
  result.class_weights = class_weights;
  result.shape.inputs = static_cast<uint32_t>(F);
  result.shape.classes = data.classes;
  result.train_rows = ntr;
  result.val_rows = nva;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto on_round = [&](const TreeRound& t) {
    EpochMetrics m;
    m.epoch = t.round;
    m.lr = job.trees.eta;
    m.train_loss = t.train_loss;
    m.val_loss = t.val_loss;
    m.val_accuracy = m.val_auc = m.val_rmse = m.val_mae = m.val_r2 = nan;
    result.epochs.push_back(m);
    if (callbacks.on_epoch) callbacks.on_epoch(m);
  };
  auto should_stop = [&](uint32_t round) { return callbacks.should_stop && callbacks.should_stop(round); };
  ASSIGN_OR_RETURN(result.trees, TrainTrees(job.trees, task, data.classes, in, job.seed, on_round, should_stop));
  result.steps = result.epochs.size();
  // The kept model (every round, or the best one of early stopping) on the validation rows:
  // the final metrics, on the kept round's line.
  if (nva > 0 && !result.epochs.empty()) {
    ASSIGN_OR_RETURN(result.val_predictions, PredictTrees(result.trees, xva.data(), nva, job.trees.threads));
    if (result.trees.best_rounds < result.epochs.size()) result.best_epoch = result.trees.best_rounds;
    EpochMetrics& kept = result.best_epoch > 0 ? result.epochs[result.best_epoch - 1] : result.epochs.back();
    SetValidationMetrics(result.val_predictions.data(), yva.data(), nva, data.classes, &kept);
  }
  return result;
}

}  // namespace enclave::trainer
