#include "recipes/trainer/settings.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace gtp::recipes {

extern const char kConfigProtoText[];  // config.proto itself (genrule config_proto_text)

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// (message name, field name) -> the field's comment: its trailing `//`
// comment, else the `//` lines right above it.
std::map<std::pair<std::string, std::string>, std::string> Comments(const char* proto_text) {
  std::map<std::pair<std::string, std::string>, std::string> out;
  std::string message;
  std::vector<std::string> above;
  for (absl::string_view raw : absl::StrSplit(proto_text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (absl::ConsumePrefix(&line, "//")) {
      above.push_back(std::string(absl::StripAsciiWhitespace(line)));
      continue;
    }
    if (absl::StartsWith(line, "message ")) {
      message = std::string(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(8), "{")));
    } else if (line.find('=') != absl::string_view::npos && absl::EndsWith(line.substr(0, line.find(';') + 1), ";")) {
      // "[repeated] type name = N;  // comment"
      const size_t eq = line.find('=');
      std::vector<absl::string_view> words =
          absl::StrSplit(absl::StripAsciiWhitespace(line.substr(0, eq)), ' ', absl::SkipEmpty());
      if (words.size() >= 2 && !message.empty()) {
        std::string comment;
        const size_t slash = line.find("//");
        if (slash != absl::string_view::npos) {
          comment = std::string(absl::StripAsciiWhitespace(line.substr(slash + 2)));
        } else {
          comment = absl::StrJoin(above, " ");
        }
        out[{message, std::string(words.back())}] = comment;
      }
    }
    above.clear();
  }
  return out;
}

std::string TypeName(const FieldDescriptor* f) {
  std::string t = f->type_name();  // "int64", "string", ...
  return f->is_repeated() ? absl::StrCat("list of ", t, " (a:b:c)") : t;
}

void Walk(const Descriptor* d, const std::string& prefix,
          const std::map<std::pair<std::string, std::string>, std::string>& comments,
          std::vector<SettingInfo>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string key = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    if (f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated()) {
      Walk(f->message_type(), key, comments, out);
      continue;
    }
    auto it = comments.find({d->name(), f->name()});
    out->push_back({key, TypeName(f), it == comments.end() ? "" : it->second});
  }
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The value of a leaf setting in `r`, as --set would take it.
std::string ValueOf(const google::protobuf::Message& r, const std::string& key) {
  const google::protobuf::Message* m = &r;
  std::vector<std::string> path = absl::StrSplit(key, '.');
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(path[i]);
    m = &m->GetReflection()->GetMessage(*m, f);
  }
  const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(path.back());
  std::string text;
  google::protobuf::TextFormat::Printer p;
  p.SetSingleLineMode(true);
  if (f->is_repeated()) {
    std::vector<std::string> items;
    for (int i = 0; i < m->GetReflection()->FieldSize(*m, f); ++i) {
      std::string v;
      p.PrintFieldValueToString(*m, f, i, &v);
      items.push_back(v);
    }
    return absl::StrJoin(items, ":");
  }
  p.PrintFieldValueToString(*m, f, -1, &text);
  return text;
}

}  // namespace

SettingsSchema RecipeSchema() { return {proto::Recipe::descriptor(), kConfigProtoText, &Choices()}; }

std::vector<SettingInfo> AllSettings(const SettingsSchema& schema) {
  std::vector<SettingInfo> out;
  Walk(schema.root, "", Comments(schema.proto_text), &out);
  return out;
}

std::vector<SettingInfo> AllSettings() { return AllSettings(RecipeSchema()); }

std::string ClosestSetting(const std::string& key) { return ClosestSetting(key, RecipeSchema()); }

std::string ClosestSetting(const std::string& key, const SettingsSchema& schema) {
  std::string best;
  size_t best_d = std::max<size_t>(2, key.size() / 4) + 1;
  for (const SettingInfo& s : AllSettings(schema)) {
    const size_t d = EditDistance(key, s.key);
    if (d < best_d) {
      best_d = d;
      best = s.key;
    }
  }
  return best;
}

const std::vector<Choice>& Choices() {
  static const std::vector<Choice>* const kChoices = new std::vector<Choice>{
      {"model.norm", {"layernorm", "rmsnorm"}},
      {"model.activation", {"gelu", "swiglu"}},
      {"model.moe.score", {"softmax", "sigmoid"}},
      {"model.moe.aux_loss_type", {"lane", "seq"}},
      {"model.moe.dispatcher", {"alltoall", "allgather"}},
      {"model.moe.drop_policy", {"probability", "position"}},
      {"parallel.backend", {"local", "ucx"}},
      {"parallel.gtp_reduce_scatter_dtype", {"f32", "bf16"}},
      {"data.source", {"corpus", "mock", "indexed"}},
      {"optim.matrices", {"adamw", "muon"}},
      {"optim.decay", {"cosine", "linear", "constant"}},
      {"train.device", {"cpu", "cuda"}},
      {"train.precision", {"f32", "bf16", "fp8"}},
      {"train.fp8_wgrad", {"fp8", "bf16"}},
      {"train.fp8_gemm", {"cublaslt", "wgmma"}},
      {"train.cuda_graphs", {"auto", "on", "off"}},
      {"train.attention", {"cudnn", "flash"}},
      {"train.pack_projections", {"off", "auto", "on"}},
  };
  return *kChoices;
}

namespace {
const Choice* ChoiceOf(const SettingsSchema& schema, const std::string& key) {
  if (schema.choices == nullptr) return nullptr;
  for (const Choice& c : *schema.choices) {
    if (c.key == key) return &c;
  }
  return nullptr;
}

// "a or b", "a, b or c".
std::string OneOf(const std::vector<std::string>& v) {
  if (v.size() == 1) return v[0];
  return absl::StrCat(absl::StrJoin(v.begin(), v.end() - 1, ", "), " or ", v.back());
}
}  // namespace

std::string ChoiceError(const std::string& key, const std::string& value) {
  return ChoiceError(RecipeSchema(), key, value);
}

std::string ChoiceError(const SettingsSchema& schema, const std::string& key, const std::string& value) {
  const Choice* c = ChoiceOf(schema, key);
  if (c == nullptr || std::find(c->values.begin(), c->values.end(), value) != c->values.end()) {
    return "";
  }
  std::string out = absl::StrCat(key, " must be ", OneOf(c->values), ", got ", value);
  // A typo or another case: the nearest word within 2 edits.
  std::string best;
  size_t best_d = 3;
  for (const std::string& v : c->values) {
    const size_t d = EditDistance(absl::AsciiStrToLower(value), v);
    if (d < best_d) best_d = d, best = v;
  }
  if (!best.empty()) absl::StrAppend(&out, " (did you mean ", best, "?)");
  return out;
}

std::string SettingsTable(const proto::Recipe& r) { return SettingsTable(r, RecipeSchema()); }

std::string SettingsTable(const google::protobuf::Message& r, const SettingsSchema& schema) {
  std::string out;
  for (const SettingInfo& s : AllSettings(schema)) {
    const Choice* c = ChoiceOf(schema, s.key);
    absl::StrAppend(&out, s.key, "=", ValueOf(r, s.key), "  (", s.type,
                    c == nullptr ? "" : absl::StrCat(": ", absl::StrJoin(c->values, " | ")), ")",
                    s.comment.empty() ? "" : absl::StrCat("  ", s.comment), "\n");
  }
  return out;
}

}  // namespace gtp::recipes
