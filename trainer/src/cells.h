// CSV cell encoding shared by the trainer's CSV reader and `predict`: the rules of
// `enclave-data seal` (docs/formats/sealed-dataset.md), so a CSV gives the same float32
// values as the file sealed from it.
#pragma once

#include <string>

namespace enclave::trainer {

std::string Trim(const std::string& s);
// 1 for yes, 0 for no (case-insensitive, trimmed), -1 otherwise.
int YesNo(const std::string& cell);
// A finite decimal number to float32 (round to nearest); false if it is not one.
bool ParseFloat(const std::string& cell, float* out);

}  // namespace enclave::trainer
