#include "strict_json.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace enclave::audit::internal {

// Length of the valid UTF-8 sequence starting at p (p < end, *p >= 0x80), or 0.
static size_t Utf8Sequence(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = *p;
  auto cont = [&](size_t i, unsigned char lo, unsigned char hi) {
    return p + i < end && p[i] >= lo && p[i] <= hi;
  };
  if (c >= 0xc2 && c <= 0xdf) return cont(1, 0x80, 0xbf) ? 2 : 0;
  if (c == 0xe0) return cont(1, 0xa0, 0xbf) && cont(2, 0x80, 0xbf) ? 3 : 0;
  if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) return cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) ? 3 : 0;
  if (c == 0xed) return cont(1, 0x80, 0x9f) && cont(2, 0x80, 0xbf) ? 3 : 0;  // no UTF-16 surrogates
  if (c == 0xf0) return cont(1, 0x90, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
  if (c == 0xf4) return cont(1, 0x80, 0x8f) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
  return 0;
}

bool ValidUtf8(std::string_view s) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  const auto end = p + s.size();
  while (p < end) {
    if (*p < 0x80) {
      ++p;
      continue;
    }
    const size_t n = Utf8Sequence(p, end);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view where, JsonDoc* doc)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), where_(where), doc_(doc) {}

  Status Run() {
    doc_->nodes_.clear();
    doc_->arena_.clear();
    uint32_t root = JsonDoc::kNone;
    if (!Value(0, &root)) return Error();
    SkipWs();
    if (p_ != end_) {
      Fail("unexpected bytes after the JSON value");
      return Error();
    }
    return OkStatus();
  }

 private:
  Status Error() const {
    if (depth_error_) {
      return InvalidInput(std::string(where_) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    }
    if (!duplicate_.empty()) {
      return InvalidInput(std::string(where_) + ": duplicate JSON key '" + duplicate_.substr(0, 64) + "'");
    }
    return InvalidInput(std::string(where_) + ": not valid JSON (or not UTF-8) at byte " +
                        std::to_string(error_at_ - begin_) + ": " + error_);
  }
  bool Fail(const char* what) {
    if (error_.empty()) {
      error_ = what;
      error_at_ = p_;
    }
    return false;
  }

  void SkipWs() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  uint32_t NewNode(JsonDoc::Kind kind) {
    doc_->nodes_.push_back(JsonDoc::Node{});
    doc_->nodes_.back().kind = kind;
    return static_cast<uint32_t>(doc_->nodes_.size() - 1);
  }

  bool Literal(const char* word, JsonDoc::Kind kind, uint32_t* out) {
    const size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return Fail("invalid literal");
    p_ += n;
    *out = NewNode(kind);
    return true;
  }

  bool Value(int depth, uint32_t* out) {
    SkipWs();
    if (p_ == end_) return Fail("unexpected end of input");
    switch (*p_) {
      case '{': return Object(depth + 1, out);
      case '[': return Array(depth + 1, out);
      case '"': {
        std::string_view s;
        if (!String(&s)) return false;
        *out = NewNode(JsonDoc::Kind::kString);
        doc_->nodes_[*out].text = s;
        return true;
      }
      case 't': return Literal("true", JsonDoc::Kind::kTrue, out);
      case 'f': return Literal("false", JsonDoc::Kind::kFalse, out);
      case 'n': return Literal("null", JsonDoc::Kind::kNull, out);
      default: return Number(out);
    }
  }

  static bool Digit(char c) { return c >= '0' && c <= '9'; }

  bool Number(uint32_t* out) {
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ == end_ || !Digit(*p_)) return Fail("invalid value");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && Digit(*p_)) ++p_;
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || !Digit(*p_)) return Fail("invalid number (digits must follow '.')");
      while (p_ < end_ && Digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !Digit(*p_)) return Fail("invalid number (digits must follow the exponent)");
      while (p_ < end_ && Digit(*p_)) ++p_;
    }
    *out = NewNode(JsonDoc::Kind::kNumber);
    doc_->nodes_[*out].text = std::string_view(start, static_cast<size_t>(p_ - start));
    return true;
  }

  bool Hex4(uint32_t* v) {
    if (end_ - p_ < 4) return Fail("\\u escape cut short");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = *p_++;
      *v <<= 4;
      if (c >= '0' && c <= '9') *v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') *v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') *v |= static_cast<uint32_t>(c - 'A' + 10);
      else return Fail("invalid \\u escape");
    }
    return true;
  }

  static void PutUtf8(uint32_t cp, std::string* s) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      s->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  // At '"'. The fast path (no escapes) returns a view into the input.
  bool String(std::string_view* out) {
    ++p_;
    const char* start = p_;
    std::string* decoded = nullptr;
    while (true) {
      if (p_ == end_) return Fail("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') break;
      if (c < 0x20) return Fail("control character in a string (must be escaped)");
      if (c < 0x80 && c != '\\') {
        if (decoded) decoded->push_back(static_cast<char>(c));
        ++p_;
        continue;
      }
      if (c >= 0x80) {
        const size_t n = Utf8Sequence(reinterpret_cast<const unsigned char*>(p_),
                                      reinterpret_cast<const unsigned char*>(end_));
        if (n == 0) return Fail("invalid UTF-8 in a string");
        if (decoded) decoded->append(p_, n);
        p_ += n;
        continue;
      }
      // A backslash escape: from here on, decode into the arena.
      if (!decoded) {
        decoded = &doc_->arena_.emplace_back(start, static_cast<size_t>(p_ - start));
      }
      ++p_;
      if (p_ == end_) return Fail("unterminated escape");
      const char e = *p_++;
      switch (e) {
        case '"': decoded->push_back('"'); break;
        case '\\': decoded->push_back('\\'); break;
        case '/': decoded->push_back('/'); break;
        case 'b': decoded->push_back('\b'); break;
        case 'f': decoded->push_back('\f'); break;
        case 'n': decoded->push_back('\n'); break;
        case 'r': decoded->push_back('\r'); break;
        case 't': decoded->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xdc00 && cp <= 0xdfff) return Fail("unpaired low surrogate escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            uint32_t lo = 0;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return Fail("unpaired high surrogate escape");
            p_ += 2;
            if (!Hex4(&lo)) return false;
            if (lo < 0xdc00 || lo > 0xdfff) return Fail("unpaired high surrogate escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          PutUtf8(cp, decoded);
          break;
        }
        default: return Fail("invalid escape");
      }
    }
    *out = decoded ? std::string_view(*decoded) : std::string_view(start, static_cast<size_t>(p_ - start));
    ++p_;  // the closing quote
    return true;
  }

  bool Object(int depth, uint32_t* out) {
    if (depth > kMaxJsonDepth) {
      depth_error_ = true;
      return Fail("too deep");
    }
    ++p_;
    const uint32_t obj = NewNode(JsonDoc::Kind::kObject);
    *out = obj;
    SkipWs();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    uint32_t prev = JsonDoc::kNone;
    // Objects in entries are small: their keys are compared as they come. A large one's
    // are sorted once it closes, so that no body costs the parser quadratic time.
    constexpr size_t kLinearKeys = 32;
    size_t members = 0;
    std::vector<std::string_view> many;
    while (true) {
      SkipWs();
      if (p_ == end_ || *p_ != '"') return Fail("expected a member name");
      std::string_view key;
      if (!String(&key)) return false;
      if (members < kLinearKeys) {
        for (uint32_t i = doc_->nodes_[obj].child; i != JsonDoc::kNone; i = doc_->nodes_[i].next) {
          if (doc_->nodes_[i].key == key) return Duplicate(key);
        }
      } else {
        if (many.empty()) {
          for (uint32_t i = doc_->nodes_[obj].child; i != JsonDoc::kNone; i = doc_->nodes_[i].next)
            many.push_back(doc_->nodes_[i].key);
        }
        many.push_back(key);
      }
      ++members;
      SkipWs();
      if (p_ == end_ || *p_ != ':') return Fail("expected ':'");
      ++p_;
      uint32_t v = JsonDoc::kNone;
      if (!Value(depth, &v)) return false;
      doc_->nodes_[v].key = key;
      Link(obj, &prev, v);
      SkipWs();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        std::sort(many.begin(), many.end());
        const auto twice = std::adjacent_find(many.begin(), many.end());
        return twice == many.end() || Duplicate(*twice);
      }
      return Fail("expected ',' or '}'");
    }
  }

  bool Duplicate(std::string_view key) {
    duplicate_ = std::string(key);
    return Fail("duplicate key");
  }

  bool Array(int depth, uint32_t* out) {
    if (depth > kMaxJsonDepth) {
      depth_error_ = true;
      return Fail("too deep");
    }
    ++p_;
    const uint32_t arr = NewNode(JsonDoc::Kind::kArray);
    *out = arr;
    SkipWs();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    uint32_t prev = JsonDoc::kNone;
    while (true) {
      uint32_t v = JsonDoc::kNone;
      if (!Value(depth, &v)) return false;
      Link(arr, &prev, v);
      SkipWs();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        return true;
      }
      return Fail("expected ',' or ']'");
    }
  }

  void Link(uint32_t parent, uint32_t* prev, uint32_t v) {
    if (*prev == JsonDoc::kNone) doc_->nodes_[parent].child = v;
    else doc_->nodes_[*prev].next = v;
    *prev = v;
    ++doc_->nodes_[parent].size;
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string_view where_;
  JsonDoc* doc_;
  std::string error_;
  const char* error_at_ = nullptr;
  std::string duplicate_;
  bool depth_error_ = false;
};

Status JsonDoc::Parse(std::string_view text, std::string_view where) {
  JsonParser p(text, where, this);
  Status s = p.Run();
  if (!s.ok()) nodes_.clear();
  return s;
}

uint32_t JsonDoc::Find(uint32_t obj, std::string_view key) const {
  if (nodes_[obj].kind != Kind::kObject) return kNone;
  for (uint32_t i = nodes_[obj].child; i != kNone; i = nodes_[i].next) {
    if (nodes_[i].key == key) return i;
  }
  return kNone;
}

bool JsonUnsigned(std::string_view lit, uint64_t* out) {
  if (lit.empty()) return false;
  uint64_t v = 0;
  for (char c : lit) {
    if (c < '0' || c > '9') return false;  // sign, fraction or exponent
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;  // does not fit: nlohmann reads it as a float
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool JsonFiniteNumber(std::string_view lit, double* out) {
  const std::string s(lit);  // strtod wants a terminated string; number literals are short
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace enclave::audit::internal
