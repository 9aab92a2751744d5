// What a trained model relies on (issue 18 §6), computed inside: permutation importance on
// the validation rows (any model family), and a linear model's coefficients with odds
// ratios. Both go to the clear report only when the job asks ([evaluation]): the
// coefficients of a linear model are the model itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/common/status.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

struct ColumnImportance {
  std::string column;  // a feature column of the schema
  double mean_drop = 0, std_drop = 0;  // over the repeats (population standard deviation)
};

// Per feature column: how much the score (accuracy; regression R^2) on the validation rows
// drops when that column's values are shuffled among those rows (Rng(seed,
// kStreamPermutation), one draw after another in column order, repeat by repeat), the
// other columns left as they are. Predicted as `predict` predicts (preprocessing included).
// Loaded data on the CPU backend; needs validation rows.
Result<std::vector<ColumnImportance>> PermutationImportance(Backend& backend, const TrainResult& r,
                                                            const LoadedData& data, const Split& split, uint64_t seed,
                                                            uint32_t repeats);

// A network without hidden layers (logistic, multinomial or linear regression): per input
// of the expanded row, per output, the coefficient on the standardized input ("per
// standard deviation") and on the raw input ("per unit": times inv_std; regression also
// times the target's scale), and for classification the odds ratios exp(coefficient);
// the intercepts. Refuses a model with hidden layers, or trees.
Result<nlohmann::json> LinearCoefficients(Backend& backend, const TrainResult& r, const dataset::DatasetSchema& schema);

}  // namespace enclave::trainer
