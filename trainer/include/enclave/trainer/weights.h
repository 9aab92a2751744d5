// Row weights of a job's [training] class_weight and sample_weight_column (docs/training.md,
// "Weights"): a training row's loss and gradient count (class weight x sample weight)
// times. The class weights come from the training rows of each run (each fold), so
// "balanced" never looks at validation rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/locked.h"

namespace enclave::trainer {

// Moves the job's sample-weight column out of the loaded features into data->sample_weights
// (the column leaves the schema: it is not a model input). The column must be a numeric
// feature column without missing values; every weight finite and >= 0 (invalid input
// naming the data row, 1-based over the job's datasets, otherwise). Host-memory backends
// only (the CPU's).
Status ExtractSampleWeights(const std::string& column, LoadedData* data);

// Per class (in class index order): the job's rule for these training rows. kBalanced:
// rows / (classes x rows of the class) (scikit-learn's "balanced"; a class without
// training rows gets 0); kGiven: the job's, which must name every class of the data and
// no other (invalid input naming the class otherwise); kNone: empty.
Result<std::vector<double>> ClassWeightsFor(const WeightSpec& spec, const LoadedData& data,
                                            const LockedArray<uint32_t>& rows);

// The weight of each of `rows` (class weight x sample weight; 1 for what the job does not
// weight). The caller refuses training rows whose weights sum to 0.
Result<LockedArray<float>> RowWeights(const std::vector<double>& class_weights, const LoadedData& data,
                                      const LockedArray<uint32_t>& rows);

}  // namespace enclave::trainer
