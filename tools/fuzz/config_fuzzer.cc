// tools/fuzz/config_fuzzer.cc — the recipe parser and `--set` overrides
// (recipes/trainer/config.h): ParseRecipe, ApplyOverrides, FinalizeRecipe.
//
// Input, by its first byte:
//   0x08 or more: recipe text, optionally followed by a line "%%" and one
//         override ("a.b.c=value") per line;
//   0x00-0x07: overrides over gpt_tiny's recipe, built from the bytes that
//         follow: each is a
//         setting (one byte picks among every scalar setting of the Recipe)
//         and a value (8 bytes: an integer, a float or a bool, as that
//         setting's type needs; strings take a length byte and bytes).
//         The text parser is protobuf's (not instrumented), so text
//         mutations rarely reach FinalizeRecipe's arithmetic; these do.
// A recipe that finalises must print as text that parses again (the
// start-up banner and checkpoints store that text).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "recipes/trainer/config.h"
#include "tools/fuzz/fuzz_util.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

struct Setting {
  std::string path;
  const FieldDescriptor* field;
};

void Collect(const Descriptor* d, const std::string& prefix, int depth, std::vector<Setting>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (depth < 4 && !f->is_repeated()) Collect(f->message_type(), path, depth + 1, out);
    } else {
      out->push_back({path, f});
    }
  }
}

const std::vector<Setting>& Settings() {
  static const auto* s = [] {
    auto* v = new std::vector<Setting>;
    Collect(gtp::recipes::proto::Recipe::descriptor(), "", 0, v);
    return v;
  }();
  return *s;
}

constexpr char kBase[] =
    "name: \"gpt_tiny\"\nmodel { vocab_size: 256 seq_len: 64 n_layer: 4 n_embd: 64 n_head: 4 }\n"
    "parallel { world_size: 4 tp: 2 tp_num_weight_shards: 4 }\n"
    "data { source: \"corpus\" seed: 1234 }\noptim { lr: 3e-3 min_lr: 3e-4 warmup_steps: 20 }\n"
    "train { steps: 200 micro_batch: 8 global_batch: 16 }\ncheckpoint { every: 100 }\n";

std::string Value(const FieldDescriptor* f, gtp::fuzz::Input& in) {
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    const int n = in.Byte() % 16;
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(in.Byte()));
    return s;
  }
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits |= static_cast<uint64_t>(in.Byte()) << (8 * i);
  // Small values most of the time: settings are small numbers.
  const int64_t v = (bits & 1) ? static_cast<int64_t>(bits) >> 1 : static_cast<int64_t>(bits >> 1) % 1000;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL: return v & 1 ? "true" : "false";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double d;
      std::memcpy(&d, &bits, 8);
      return (bits & 2) ? absl::StrCat(d) : absl::StrCat(v / 1000.0);
    }
    case FieldDescriptor::CPPTYPE_ENUM: return absl::StrCat(v % 8);
    default:
      if (f->is_repeated()) return absl::StrCat(v % 64, ":", (v >> 8) % 64, ":", (v >> 16) % 64);
      return absl::StrCat(v);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gtp::fuzz::Input in(data, size);
  const bool structured = size > 0 && data[0] < 0x08;
  if (structured) in.Byte();
  std::string text;
  std::vector<std::string> overrides;
  if (structured) {
    text = kBase;
    for (int i = 0; i < 16 && size > 0; ++i) {
      const uint8_t pick = in.Byte();
      if (pick == 0) break;
      const Setting& s = Settings()[pick % Settings().size()];
      overrides.push_back(absl::StrCat(s.path, "=", Value(s.field, in)));
    }
  } else {
    const std::string rest = in.Rest();
    text = rest;
    const size_t sep = rest.find("\n%%\n");
    if (sep != std::string::npos) {
      text = rest.substr(0, sep);
      overrides = absl::StrSplit(rest.substr(sep + 4), '\n');
    }
  }
  absl::StatusOr<gtp::recipes::proto::Recipe> r = gtp::recipes::ParseRecipe(text, "fuzz");
  if (!r.ok()) return 0;
  if (!gtp::recipes::ApplyOverrides(overrides, &*r).ok()) return 0;
  if (!gtp::recipes::FinalizeRecipe(&*r).ok()) return 0;
  const std::string printed = gtp::recipes::RecipeText(*r);
  absl::StatusOr<gtp::recipes::proto::Recipe> again = gtp::recipes::ParseRecipe(printed, "printed");
  if (!again.ok()) {
    std::fprintf(stderr, "the finalised recipe does not parse back: %s\n%s\n",
                 std::string(again.status().message()).c_str(), printed.c_str());
    std::abort();
  }
  return 0;
}
