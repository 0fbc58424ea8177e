// data/tokenizer/internal/json.h — the one JSON shape a BPE vocab.json has:
// a flat object of string keys and integer values, {"!": 0, "\u0120the": 262}.
//
// Strict RFC 8259 for that subset: all string escapes (\" \\ \/ \b \f \n \r
// \t \uXXXX, surrogate pairs joined into one code point; a lone surrogate is
// an error), whitespace between tokens, nothing after the closing brace.
// Values must be integers (no fraction or exponent) within int32.
// FindStringField reads any JSON object (nesting up to depth 64); ParseJson
// reads any JSON document (tokenizer.json) into a JsonValue tree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::data::tokenizer_internal {

// A parsed JSON value. Objects keep their members in file order, duplicates
// included (the reader decides).
struct JsonValue {
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool integral = false;  // a number with no fraction or exponent that fits int64
  int64_t integer = 0;    // its value when integral
  std::string string;
  std::vector<JsonValue> items;   // array elements; object member values
  std::vector<std::string> keys;  // object member names, parallel to items

  bool is_null() const { return type == Type::kNull; }
  // The first member named `key` of an object; null when absent or not an object.
  const JsonValue* Find(absl::string_view key) const;
};

// Parses a whole document (nesting up to depth 64, nothing after it).
// InvalidArgumentError with the byte offset otherwise.
absl::StatusOr<JsonValue> ParseJson(absl::string_view json);

// Parses `json`; the pairs come back in file order (duplicates kept; the
// caller decides). InvalidArgumentError with the byte offset otherwise.
absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ParseStringIntObject(
    absl::string_view json);

// For JSONL datasets: the string value of `key` in the object `json` (one
// line of a .jsonl file), std::nullopt when the key is absent. Other values
// of any JSON type are validated and skipped. InvalidArgumentError for
// malformed JSON or a non-string value under `key`.
absl::StatusOr<std::optional<std::string>> FindStringField(absl::string_view json,
                                                           absl::string_view key);

// A tokenizer file's bytes: NotFound naming `path` when it cannot be opened,
// DataLoss when reading fails.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace gtp::data::tokenizer_internal
