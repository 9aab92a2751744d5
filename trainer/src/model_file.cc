#include "enclave/trainer/model_file.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "enclave/crypto/hash.h"
#include "le_cursor.h"

using enclave::dataset::ColumnKind;

namespace enclave::trainer {
namespace {

constexpr size_t kFixedBytes = 24;  // magic .. reserved, before the hidden sizes
constexpr size_t kDigestBytes = kModelDigestBytes;
constexpr uint8_t kModelFamilyNetwork = 0;  // version 2's `family`
constexpr uint8_t kModelFamilyTrees = 1;

// Version 2's preprocessing section (raw feature count known from the schema): a fill per
// column, then an indicator flag per column; checked against the schema's columns.
Status ReadPreprocessing(ByteReader& b, const dataset::DatasetSchema& schema, Impute impute, Preprocessing* out) {
  *out = PlanPreprocessing(schema, {impute, false});
  const size_t F = out->raw_features();
  ByteSpan raw;
  const size_t at = b.offset();
  RETURN_IF_ERROR(b.Bytes("preprocessing", 5 * F, &raw).Annotate("model file"));
  for (size_t j = 0; j < F; ++j) {
    ColumnPlan& c = out->columns[j];
    const float fill = LoadLe32As<float>(raw.data() + 4 * j);
    const uint8_t ind = raw[4 * F + j];
    const std::string where = "model file: feature " + std::to_string(j) + " ('" + schema.columns[j < schema.label_column() ? j : j + 1].name + "')";
    if (!std::isfinite(fill)) return InvalidInput(where + ": fill at offset " + std::to_string(at + 4 * j) + " is not finite");
    if (c.kind == ColumnKind::kCategorical &&
        !(fill >= 0.0f && fill < static_cast<float>(c.categories) && fill == std::floor(fill))) {
      return InvalidInput(where + ": fill at offset " + std::to_string(at + 4 * j) + " is not a category index");
    }
    if (impute == Impute::kKeepMissing && (fill != 0.0f || std::signbit(fill) || ind != 0)) {
      return InvalidInput(where + ": trees keep missing values: fill and indicator at offsets " + std::to_string(at + 4 * j) +
                          " and " + std::to_string(at + 4 * F + j) + " must be 0");
    }
    if (ind > 1 || (ind == 1 && !c.missing_allowed)) {
      return InvalidInput(where + ": indicator at offset " + std::to_string(at + 4 * F + j) +
                          (ind > 1 ? " is not 0 or 1" : " is set for a column without missing values"));
    }
    c.fill = fill;
    c.indicator = ind == 1;
  }
  return OkStatus();
}

Status ReadFloats(ByteReader& r, const char* field, size_t n, LockedArray<float>* out, bool positive) {
  ByteSpan raw;
  const size_t at = r.offset();
  RETURN_IF_ERROR(r.Bytes(field, n * 4, &raw));
  ASSIGN_OR_RETURN(*out, LockedArray<float>::Create(n));
  for (size_t i = 0; i < n; ++i) {
    const float v = LoadLe32As<float>(raw.data() + 4 * i);
    if (!std::isfinite(v) || (positive && !(v > 0.0f))) {
      return InvalidInput(std::string("model file: ") + field + "[" + std::to_string(i) + "] at offset " +
                          std::to_string(at + 4 * i) + " is " + (positive ? "not a finite positive number" : "not finite"));
    }
    (*out)[i] = v;
  }
  return OkStatus();
}

// The trees' part after the preprocessing: rounds, the booster's length, its bytes (to the
// end). XGBoost checks the bytes when predict loads them (trees.h, LoadBooster).
Result<ModelFile> ReadTrees(ByteReader& b, ModelFile m) {
  uint32_t rounds = 0, length = 0;
  const size_t at = b.offset();
  RETURN_IF_ERROR(b.U32("rounds", &rounds).Annotate("model file"));
  RETURN_IF_ERROR(b.U32("booster_length", &length).Annotate("model file"));
  if (rounds < 1 || rounds > kMaxTreeRounds) {
    return InvalidInput("model file: rounds " + std::to_string(rounds) + " at offset " + std::to_string(at) +
                        " out of range 1.." + std::to_string(kMaxTreeRounds));
  }
  if (length < 1 || length > kMaxBoosterBytes || length != b.remaining()) {
    return InvalidInput("model file: booster_length " + std::to_string(length) + " at offset " + std::to_string(at + 4) +
                        ", " + std::to_string(b.remaining()) + " bytes remain before the digest");
  }
  ByteSpan booster;
  RETURN_IF_ERROR(b.Bytes("booster", length, &booster).Annotate("model file"));
  ASSIGN_OR_RETURN(m.trees.booster, crypto::SecretBytes::CopyFrom(booster));
  m.trees.features = m.shape.inputs;
  m.trees.best_rounds = rounds;
  const uint32_t classes = m.shape.classes;
  m.trees.task = classes == 0 ? TreeTask::kRegression : classes == 2 ? TreeTask::kBinary : TreeTask::kMulticlass;
  m.trees.classes = classes == 0 ? 1 : classes;
  return m;
}

}  // namespace

uint16_t ModelVersionFor(const Preprocessing& p, const ModelShape& s, ModelFamily family, float threshold) {
  if (s.classes == 2 && threshold != kDefaultThreshold) return kModelVersion3;
  return p.identity() && !s.regression() && family == ModelFamily::kMlp ? kModelVersion : kModelVersion2;
}
const char* ModelFormatIdFor(const Preprocessing& p, const ModelShape& s, ModelFamily family, float threshold) {
  switch (ModelVersionFor(p, s, family, threshold)) {
    case kModelVersion: return kModelFormatId;
    case kModelVersion2: return kModelFormatIdV2;
    default: return kModelFormatIdV3;
  }
}

Result<std::vector<uint8_t>> EncodeModelHead(const ModelShape& s, const dataset::DatasetSchema& schema,
                                             const Preprocessing* prep, float label_mean, float label_scale,
                                             ModelFamily family, float threshold) {
  const bool trees = family == ModelFamily::kXgboost;
  const Preprocessing identity = PlanPreprocessing(schema, {trees ? Impute::kKeepMissing : Impute::kMedian, !trees});
  const Preprocessing& p = prep != nullptr ? *prep : identity;
  if ((p.impute == Impute::kKeepMissing) != trees || (trees && !s.hidden.empty())) {
    return Internal("EncodeModelHead: trees, and only trees, keep missing values; they have no hidden layers");
  }
  if (s.hidden.size() > 16 || schema.feature_count() != p.raw_features() || p.inputs() != s.inputs ||
      schema.classes.size() != s.classes) {
    return Internal("EncodeModelHead: shape, preprocessing and schema disagree");
  }
  // The network's target scale (the trees predict the target itself).
  const bool scaled = s.regression() && !trees;
  if (s.regression() != (schema.task == dataset::Task::kRegression) ||
      (scaled && !(std::isfinite(label_mean) && std::isfinite(label_scale) && label_scale > 0))) {
    return Internal("EncodeModelHead: regression shape, schema and target scale disagree");
  }
  if (!(threshold >= 0.0f && threshold <= 1.0f) || (s.classes != 2 && threshold != kDefaultThreshold)) {
    return Internal("EncodeModelHead: a threshold is in [0, 1], and only a binary model has one");
  }
  const uint16_t version = ModelVersionFor(p, s, family, threshold);
  const std::vector<uint8_t> encoded = dataset::EncodeSchema(schema);
  const size_t prep_bytes =
      version == kModelVersion ? 0 : 5 * p.raw_features() + (scaled ? 8 : 0) + (version == kModelVersion3 ? 4 : 0);
  std::vector<uint8_t> head(kFixedBytes + 4 * s.hidden.size() + 4 + encoded.size() + prep_bytes);
  LeCursor c(head);
  c.Raw(kModelMagic, sizeof(kModelMagic));
  c.Le(version, 2);
  c.Le(0, 2);  // flags
  c.Le(s.inputs, 4);
  c.Le(s.classes, 4);
  c.Le(trees ? 0 : static_cast<uint8_t>(s.activation), 1);
  c.Le(s.hidden.size(), 1);
  if (version == kModelVersion) {
    c.Le(0, 2);  // reserved
  } else {
    c.Le(trees ? kModelFamilyTrees : kModelFamilyNetwork, 1);
    c.Le(static_cast<uint8_t>(p.impute), 1);
  }
  for (uint32_t h : s.hidden) c.Le(h, 4);
  c.Le(encoded.size(), 4);
  c.Raw(encoded.data(), encoded.size());
  if (version != kModelVersion) {
    for (const ColumnPlan& col : p.columns) c.Array32(&col.fill, 1);
    for (const ColumnPlan& col : p.columns) c.Le(col.indicator ? 1 : 0, 1);
    if (scaled) {
      c.Array32(&label_mean, 1);
      c.Array32(&label_scale, 1);
    }
    if (version == kModelVersion3) c.Array32(&threshold, 1);
  }
  if (c.pos() != head.size()) return Internal("EncodeModelHead: size mismatch");
  return head;
}

// Trees: the head, then rounds, the booster's length and bytes, then the digest.
Result<crypto::SecretBytes> EncodeTreesModelFile(const ModelFile& m) {
  const ModelShape& s = m.shape;
  const size_t n = m.trees.booster.size();
  if (n == 0 || n > kMaxBoosterBytes || m.trees.features != s.inputs || m.trees.best_rounds == 0) {
    return Internal("EncodeModelFile: the trees do not match the shape");
  }
  ASSIGN_OR_RETURN(const std::vector<uint8_t> head,
                   EncodeModelHead(s, m.schema, &m.preprocessing, 0, 1, ModelFamily::kXgboost, m.threshold));
  const size_t total = head.size() + 8 + n + kDigestBytes;
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(total));
  LeCursor c(out.ExposeSecretMutable());
  c.Raw(head.data(), head.size());
  c.Le(m.trees.best_rounds, 4);
  c.Le(n, 4);
  c.Raw(m.trees.booster.ExposeSecret().data(), n);
  const crypto::Digest256 d = crypto::Sha256(out.ExposeSecret().first(c.pos()));
  c.Raw(d.data(), d.size());
  if (c.pos() != total) return Internal("EncodeModelFile: size mismatch");
  return out;
}

Result<crypto::SecretBytes> EncodeModelFile(const ModelFile& m) {
  if (m.family == ModelFamily::kXgboost) return EncodeTreesModelFile(m);
  const ModelShape& s = m.shape;
  const size_t F = s.inputs, P = s.parameter_count();
  if (m.mean.size() != F || m.inv_std.size() != F || m.params.size() != P) {
    return Internal("EncodeModelFile: array sizes do not match the shape");
  }
  ASSIGN_OR_RETURN(const std::vector<uint8_t> head,
                   EncodeModelHead(s, m.schema, &m.preprocessing, m.label_mean, m.label_scale, ModelFamily::kMlp,
                                   m.threshold));
  const size_t total = head.size() + 4 * (2 * F + P) + kDigestBytes;
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(total));
  LeCursor c(out.ExposeSecretMutable());
  c.Raw(head.data(), head.size());
  c.Array32(m.mean.data(), F);
  c.Array32(m.inv_std.data(), F);
  c.Array32(m.params.data(), P);
  const crypto::Digest256 d = crypto::Sha256(out.ExposeSecret().first(c.pos()));
  c.Raw(d.data(), d.size());
  if (c.pos() != total) return Internal("EncodeModelFile: size mismatch");
  return out;
}

Result<ModelFile> ParseModelFile(ByteSpan bytes) {
  ByteReader r(bytes);
  ByteSpan magic;
  RETURN_IF_ERROR(r.Bytes("magic", sizeof(kModelMagic), &magic).Annotate("model file"));
  if (std::memcmp(magic.data(), kModelMagic, sizeof(kModelMagic)) != 0) {
    return InvalidInput("not a model file (magic is not ENCLMODL)");
  }
  uint16_t version = 0, flags = 0, reserved = 0;
  RETURN_IF_ERROR(r.U16("version", &version).Annotate("model file"));
  if (version != kModelVersion && version != kModelVersion2 && version != kModelVersion3) {
    return Unsupported("model file version " + std::to_string(version) + " (this build reads 1, 2 and 3)");
  }
  const bool v2_layout = version != kModelVersion;  // versions 2 and 3
  // Everything after the version is covered by the digest: check it before trusting any field.
  if (bytes.size() < kFixedBytes + 4 + kDigestBytes) {
    return InvalidInput("model file is truncated (" + std::to_string(bytes.size()) + " bytes)");
  }
  const size_t body = bytes.size() - kDigestBytes;
  const crypto::Digest256 want = crypto::Sha256(bytes.first(body));
  if (std::memcmp(want.data(), bytes.data() + body, kDigestBytes) != 0) {
    return InvalidInput("model file digest does not match its contents (damaged or truncated file)");
  }
  ByteReader b(bytes.first(body));
  ByteSpan skip;
  RETURN_IF_ERROR(b.Bytes("magic", 10, &skip));
  RETURN_IF_ERROR(b.U16("flags", &flags).Annotate("model file"));
  if (flags != 0) return InvalidInput("model file: flags at offset 10 must be 0, got " + std::to_string(flags));
  ModelFile m;
  ModelShape& s = m.shape;
  uint8_t act = 0, nh = 0;
  RETURN_IF_ERROR(b.U32("inputs", &s.inputs).Annotate("model file"));
  RETURN_IF_ERROR(b.U32("classes", &s.classes).Annotate("model file"));
  RETURN_IF_ERROR(b.U8("activation", &act).Annotate("model file"));
  RETURN_IF_ERROR(b.U8("hidden_count", &nh).Annotate("model file"));
  uint8_t family = 0, impute = 0;
  if (!v2_layout) {
    RETURN_IF_ERROR(b.U16("reserved", &reserved).Annotate("model file"));
  } else {
    RETURN_IF_ERROR(b.U8("family", &family).Annotate("model file"));
    RETURN_IF_ERROR(b.U8("impute", &impute).Annotate("model file"));
  }
  if (s.inputs < 1 || s.inputs > kMaxModelFeatures) {
    return InvalidInput("model file: inputs " + std::to_string(s.inputs) + " out of range 1..2^20");
  }
  if ((s.classes < 2 && !(version == kModelVersion2 && s.classes == 0)) || s.classes > dataset::kMaxClasses) {
    return InvalidInput("model file: classes " + std::to_string(s.classes) + " out of range 2..65536" +
                        (version == kModelVersion2 ? " (or 0: regression)" : ""));
  }
  if (version == kModelVersion3 && s.classes != 2) {
    return InvalidInput("model file: version 3 (a decision threshold) with " + std::to_string(s.classes) +
                        " classes: only a binary model has a threshold");
  }
  if (family != kModelFamilyNetwork && family != kModelFamilyTrees) {
    return Unsupported("model file: model family " + std::to_string(family) + " at offset 22");
  }
  const bool trees = family == kModelFamilyTrees;
  if (trees) {
    m.family = ModelFamily::kXgboost;
    if (act != 0 || nh != 0) return InvalidInput("model file: trees have activation 0 and hidden_count 0 (offsets 20, 21)");
    if (impute != static_cast<uint8_t>(Impute::kKeepMissing)) {
      return InvalidInput("model file: trees keep missing values: impute at offset 23 must be 3");
    }
  } else {
    if (act < kernels::kActRelu || act > kernels::kActSigmoid) {
      return InvalidInput("model file: unknown activation " + std::to_string(act) + " at offset 20");
    }
    s.activation = static_cast<Activation>(act);
    if (nh > 16) return InvalidInput("model file: hidden_count " + std::to_string(nh) + " above 16");
    if (impute > static_cast<uint8_t>(Impute::kMostFrequent)) {
      return InvalidInput("model file: impute " + std::to_string(impute) + " at offset 23 is not 0, 1 or 2");
    }
  }
  if (reserved != 0) return InvalidInput("model file: reserved bytes at offset 22 must be 0");
  for (uint8_t i = 0; i < nh; ++i) {
    uint32_t h = 0;
    RETURN_IF_ERROR(b.U32("hidden", &h).Annotate("model file"));
    if (h < 1 || h > 65536) {
      return InvalidInput("model file: hidden[" + std::to_string(i) + "] = " + std::to_string(h) + " out of range 1..65536");
    }
    s.hidden.push_back(h);
  }
  // Bound the parameter count before any size arithmetic on it can overflow.
  size_t params = 0;
  for (size_t l = 0; l < s.layers(); ++l) {
    params += size_t{s.fan_in(l)} * s.fan_out(l) + s.fan_out(l);
    if (params > kMaxModelParameters) return InvalidInput("model file: more than 2^28 parameters");
  }
  uint32_t schema_len = 0;
  ByteSpan schema;
  RETURN_IF_ERROR(b.U32("schema_length", &schema_len).Annotate("model file"));
  RETURN_IF_ERROR(b.Bytes("schema", schema_len, &schema).Annotate("model file"));
  ASSIGN_OR_RETURN(m.schema, dataset::DecodeSchema(schema));
  // Version 1 holds no preprocessing: its schema must need none (a v1 schema); version 2
  // exists only for a schema that does (categorical columns or missing values).
  const Preprocessing identity = PlanPreprocessing(m.schema, {});
  const bool regression = m.schema.task == dataset::Task::kRegression;
  if (version == kModelVersion) {
    if (!identity.identity()) {
      return InvalidInput("model file: version 1 with a schema that has categorical columns or missing values");
    }
    m.preprocessing = identity;
  } else {
    if (version == kModelVersion2 && identity.identity() && !regression && !trees) {
      return InvalidInput("model file: version 2 of a classification model with nothing to preprocess (that model is "
                          "version 1)");
    }
    RETURN_IF_ERROR(ReadPreprocessing(b, m.schema, static_cast<Impute>(impute), &m.preprocessing));
    if (regression && !trees) {
      ByteSpan raw;
      const size_t at = b.offset();
      RETURN_IF_ERROR(b.Bytes("label_scale", 8, &raw).Annotate("model file"));
      m.label_mean = LoadLe32As<float>(raw.data());
      m.label_scale = LoadLe32As<float>(raw.data() + 4);
      if (!std::isfinite(m.label_mean) || !std::isfinite(m.label_scale) || !(m.label_scale > 0.0f)) {
        return InvalidInput("model file: label_mean and label_scale at offset " + std::to_string(at) +
                            " must be finite and the scale positive");
      }
    }
    if (version == kModelVersion3) {
      ByteSpan raw;
      const size_t at = b.offset();
      RETURN_IF_ERROR(b.Bytes("threshold", 4, &raw).Annotate("model file"));
      m.threshold = LoadLe32As<float>(raw.data());
      // Canonical: a threshold of 0.5 is written in version 1 or 2.
      if (!(m.threshold >= 0.0f && m.threshold <= 1.0f) || m.threshold == kDefaultThreshold) {
        return InvalidInput("model file: threshold at offset " + std::to_string(at) +
                            " must be in [0, 1] and not 0.5 (a model at 0.5 is version 1 or 2)");
      }
    }
  }
  if (m.preprocessing.inputs() != s.inputs) {
    return InvalidInput("model file: the schema and preprocessing give " + std::to_string(m.preprocessing.inputs()) +
                        " inputs, the model has " + std::to_string(s.inputs));
  }
  if (m.schema.classes.size() != s.classes) {
    return InvalidInput("model file: the schema has " + std::to_string(m.schema.classes.size()) +
                        " classes, the model " + std::to_string(s.classes) + (s.classes == 0 ? " (regression)" : ""));
  }
  if (trees) return ReadTrees(b, std::move(m));
  const size_t expect = size_t{4} * (2 * size_t{s.inputs} + params);
  if (b.remaining() != expect) {
    return InvalidInput("model file: " + std::to_string(b.remaining()) + " bytes of numbers at offset " +
                        std::to_string(b.offset()) + ", the shape needs " + std::to_string(expect));
  }
  RETURN_IF_ERROR(ReadFloats(b, "mean", s.inputs, &m.mean, false));
  RETURN_IF_ERROR(ReadFloats(b, "inv_std", s.inputs, &m.inv_std, true));
  RETURN_IF_ERROR(ReadFloats(b, "params", params, &m.params, false));
  return m;
}

Result<ModelFile> MakeModelFile(const ModelShape& shape, const dataset::DatasetSchema& schema,
                                const LockedArray<float>& mean, const LockedArray<float>& inv_std,
                                const LockedArray<float>& params, const Preprocessing* prep) {
  ModelFile m;
  m.shape = shape;
  m.schema = schema;
  m.preprocessing = prep != nullptr ? *prep : PlanPreprocessing(schema, {});
  ASSIGN_OR_RETURN(m.mean, mean.Clone());
  ASSIGN_OR_RETURN(m.inv_std, inv_std.Clone());
  ASSIGN_OR_RETURN(m.params, params.Clone());
  return m;
}

}  // namespace enclave::trainer
