#include "recipes/trainer/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "layers/layer_kind.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "parallel/parallel_config.h"
#include "parallel/rank_generator.h"
#include "recipes/trainer/settings.h"

namespace gtp::recipes {

namespace {

// Collects the parser's first error as one line.
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

// parallel.order / parallel.expert_order: "" (the default) or a permutation
// of the six axes. The rank generator itself lets size-1 axes be left out;
// a recipe names them all, so the order means the same on every layout.
absl::Status CheckOrder(const char* setting, const std::string& order, const char* fallback) {
  if (order.empty()) return absl::OkStatus();
  const std::string fix =
      absl::StrCat(" (", setting, " lists each of tp, gtp, cp, ep, dp, pp once, fastest-varying "
                   "first; the default \"", fallback, "\" works)");
  absl::StatusOr<std::vector<parallel::Axis>> axes = parallel::ParseAxisList(order, setting);
  if (!axes.ok()) return Bad(absl::StrCat(axes.status().message(), fix));
  std::vector<std::string> missing;
  for (parallel::Axis a : parallel::kAllAxes) {
    if (std::find(axes->begin(), axes->end(), a) == axes->end()) {
      missing.push_back(parallel::AxisName(a));
    }
  }
  if (!missing.empty()) {
    return Bad(absl::StrCat(setting, " '", order, "' lacks ", absl::StrJoin(missing, ", "), fix));
  }
  return absl::OkStatus();
}

// Copies the field at `path` from `delta` into `r`, default values included
// (MergeFrom would skip a proto3 scalar that is 0, false or "", so
// `--set optim.weight_decay=0` would keep the file's value).
void SetLeaf(const google::protobuf::Message& delta, const std::vector<std::string>& path,
             google::protobuf::Message* r) {
  const google::protobuf::Message* src = &delta;
  google::protobuf::Message* dst = r;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const google::protobuf::FieldDescriptor* f = src->GetDescriptor()->FindFieldByName(path[i]);
    src = &src->GetReflection()->GetMessage(*src, f);
    dst = dst->GetReflection()->MutableMessage(dst, f);
  }
  const google::protobuf::FieldDescriptor* f = src->GetDescriptor()->FindFieldByName(path.back());
  const google::protobuf::Reflection* in = src->GetReflection();
  const google::protobuf::Reflection* out = dst->GetReflection();
  using FD = google::protobuf::FieldDescriptor;
  if (f->is_repeated()) {  // a list is replaced whole
    GTP_CHECK(f->cpp_type() == FD::CPPTYPE_INT32, "override of the list ", f->full_name(),
              ": only integer lists have a rule");
    out->ClearField(dst, f);
    for (int i = 0; i < in->FieldSize(*src, f); ++i) out->AddInt32(dst, f, in->GetRepeatedInt32(*src, f, i));
    return;
  }
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32: out->SetInt32(dst, f, in->GetInt32(*src, f)); break;
    case FD::CPPTYPE_INT64: out->SetInt64(dst, f, in->GetInt64(*src, f)); break;
    case FD::CPPTYPE_UINT32: out->SetUInt32(dst, f, in->GetUInt32(*src, f)); break;
    case FD::CPPTYPE_UINT64: out->SetUInt64(dst, f, in->GetUInt64(*src, f)); break;
    case FD::CPPTYPE_DOUBLE: out->SetDouble(dst, f, in->GetDouble(*src, f)); break;
    case FD::CPPTYPE_FLOAT: out->SetFloat(dst, f, in->GetFloat(*src, f)); break;
    case FD::CPPTYPE_BOOL: out->SetBool(dst, f, in->GetBool(*src, f)); break;
    case FD::CPPTYPE_ENUM: out->SetEnumValue(dst, f, in->GetEnumValue(*src, f)); break;
    case FD::CPPTYPE_STRING: out->SetString(dst, f, in->GetString(*src, f)); break;
    case FD::CPPTYPE_MESSAGE:
      out->MutableMessage(dst, f)->CopyFrom(in->GetMessage(*src, f));
      break;
  }
}

}  // namespace

absl::Status ParseConfig(const std::string& text, const std::string& origin,
                         google::protobuf::Message* out) {
  google::protobuf::TextFormat::Parser parser;
  Collector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, out)) {
    return Bad(absl::StrCat(origin, ": ", errors.first()));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::Recipe> ParseRecipe(const std::string& text, const std::string& origin) {
  proto::Recipe r;
  GTP_RETURN_IF_ERROR(ParseConfig(text, origin, &r));
  return r;
}

absl::Status ApplyOverrides(const std::vector<std::string>& overrides, proto::Recipe* r) {
  return ApplyOverrides(overrides, RecipeSchema(), r);
}

absl::Status ApplyOverrides(const std::vector<std::string>& overrides, const SettingsSchema& schema,
                            google::protobuf::Message* r) {
  for (const std::string& o : overrides) {
    if (o.empty()) continue;
    const size_t eq = o.find('=');
    if (eq == std::string::npos) return Bad(absl::StrCat("override '", o, "' is not key=value"));
    std::vector<std::string> path = absl::StrSplit(o.substr(0, eq), '.');
    std::string value = o.substr(eq + 1);
    // Bare strings are quoted for the text format.
    const auto* field = [&]() -> const google::protobuf::FieldDescriptor* {
      const google::protobuf::Descriptor* d = schema.root;
      const google::protobuf::FieldDescriptor* f = nullptr;
      for (const std::string& p : path) {
        if (d == nullptr) return nullptr;
        f = d->FindFieldByName(p);
        if (f == nullptr) return nullptr;
        d = f->message_type();
      }
      return f;
    }();
    if (field == nullptr) {
      const std::string near = ClosestSetting(o.substr(0, eq), schema);
      return Bad(absl::StrCat("override '", o, "': no such setting",
                              near.empty() ? "" : absl::StrCat(" (did you mean ", near, "?)"),
                              "; --list_settings prints them all"));
    }
    // Lists: a=1:2:3 (',' separates overrides).
    if (field->is_repeated()) value = absl::StrCat("[", absl::StrJoin(absl::StrSplit(value, ':'), ", "), "]");
    if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING &&
        (value.empty() || value.front() != '"')) {
      value = absl::StrCat("\"", value, "\"");
    }
    std::string text = absl::StrCat(path.back(), ": ", value);
    for (size_t i = path.size() - 1; i-- > 0;) text = absl::StrCat(path[i], " { ", text, " }");
    std::unique_ptr<google::protobuf::Message> delta(r->New());
    google::protobuf::TextFormat::Parser parser;
    Collector errors;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(text, delta.get())) {
      return Bad(absl::StrCat("override '", o, "': ", errors.first()));
    }
    SetLeaf(*delta, path, r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  // (A directory used to parse as an empty recipe: "model.vocab_size must be > 0".)
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", path, " is a directory: give a recipe file (e.g. recipes/gpt_tiny/gpt_tiny.pbtxt)"));
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // A UTF-8 byte-order mark (some editors write one) is not part of the text.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  return text;
}

absl::StatusOr<proto::Recipe> LoadRecipe(const std::string& path,
                                         const std::vector<std::string>& overrides) {
  GTP_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(path));
  GTP_ASSIGN_OR_RETURN(proto::Recipe r, ParseRecipe(text, path));
  GTP_RETURN_IF_ERROR(ApplyOverrides(overrides, &r));
  GTP_RETURN_IF_ERROR(FinalizeRecipe(&r));
  return r;
}

namespace {

// No numeric setting of the recipe takes a negative or non-finite value (0
// means "the default" where a default exists): a negative count or a NaN
// used to be taken as 0 or the default silently (model.init_std=nan trained
// with every step skipped; train.global_batch=-8 trained with 4).
absl::Status CheckNumbersUnder(const google::protobuf::Message& m, const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* rf = m.GetReflection();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string key = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!f->is_repeated() && rf->HasField(m, f)) GTP_RETURN_IF_ERROR(CheckNumbersUnder(rf->GetMessage(m, f), key));
      continue;
    }
    const int n = f->is_repeated() ? rf->FieldSize(m, f) : 1;
    for (int k = 0; k < n; ++k) {
      double v = 0;
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32: v = f->is_repeated() ? rf->GetRepeatedInt32(m, f, k) : rf->GetInt32(m, f); break;
        case FieldDescriptor::CPPTYPE_INT64:
          v = static_cast<double>(f->is_repeated() ? rf->GetRepeatedInt64(m, f, k) : rf->GetInt64(m, f));
          break;
        case FieldDescriptor::CPPTYPE_FLOAT: v = f->is_repeated() ? rf->GetRepeatedFloat(m, f, k) : rf->GetFloat(m, f); break;
        case FieldDescriptor::CPPTYPE_DOUBLE: v = f->is_repeated() ? rf->GetRepeatedDouble(m, f, k) : rf->GetDouble(m, f); break;
        default: continue;
      }
      if (!std::isfinite(v) || v < 0) {
        return Bad(absl::StrCat(key, " must be a finite number >= 0, got ", v,
                                " (0 takes the default; --list_settings shows what each setting means)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNumbers(const google::protobuf::Message& m) { return CheckNumbersUnder(m, ""); }

// FinalizeRecipe's defaults and checks, setting by setting (below).
static absl::Status FinalizeChecked(proto::Recipe* r);

absl::StatusOr<std::vector<layers::LayerKind>> LayerKindsOf(const proto::Model& m) {
  const auto& e = m.moe();
  return layers::LayerKinds(m.layer_pattern(), m.n_layer(),
                            {e.num_experts() > 0, std::max(1, e.every_n()), e.pattern()});
}

absl::Status FinalizeRecipe(proto::Recipe* r) {
  // The settings as given: the checks below name their own settings first,
  // and CheckNumbers then catches any other negative or NaN that a default
  // would have replaced silently.
  const proto::Recipe given = *r;
  absl::Status st = FinalizeChecked(r);
  if (!st.ok()) return st;
  return CheckNumbers(given);
}

static absl::Status FinalizeChecked(proto::Recipe* r) {
  auto* m = r->mutable_model();
  if (m->vocab_size() <= 0) return Bad("model.vocab_size must be > 0");
  if (m->seq_len() <= 0) return Bad("model.seq_len must be > 0");
  if (!m->layer_pattern().empty()) {
    absl::StatusOr<layers::LayerPattern> pattern = layers::ParseLayerPattern(m->layer_pattern());
    if (!pattern.ok()) {
      return Bad(absl::StrCat("model.layer_pattern \"", m->layer_pattern(), "\": ", pattern.status().message()));
    }
    if (layers::AnyFfn(pattern->layers, layers::FfnKind::kMoe) && m->moe().num_experts() <= 0) {
      return Bad("model.layer_pattern has MoE layers ('E'): set model.moe.num_experts");
    }
    const int n_layers = static_cast<int>(pattern->layers.size());
    const int segments = static_cast<int>(pattern->bars.size()) + 1;
    const std::vector<int>& bars = pattern->bars;
    if (m->n_layer() != 0 && m->n_layer() != n_layers) {
      return Bad(absl::StrCat("model.layer_pattern has ", n_layers, " layers but model.n_layer is ",
                              m->n_layer(), " (0 lets the pattern decide)"));
    }
    m->set_n_layer(n_layers);
    auto* p = r->mutable_parallel();
    const int64_t parts = int64_t{std::max(1, p->pp())} * std::max(1, p->vpp());  // no int overflow
    if (!bars.empty() && parts > 1 && p->pp_boundaries_size() == 0) {
      if (segments != parts) {
        return Bad(absl::StrCat("model.layer_pattern has ", segments, " pipeline segments ('|') for ",
                                parts, " stages (parallel.pp × parallel.vpp)"));
      }
      p->add_pp_boundaries(0);
      for (int b : bars) p->add_pp_boundaries(b);
    }
    auto* mb = m->mutable_mamba();
    if (mb->d_state() == 0) mb->set_d_state(16);
    if (mb->d_conv() == 0) mb->set_d_conv(4);
    if (mb->expand() == 0) mb->set_expand(2);
    if (mb->head_dim() == 0) mb->set_head_dim(16);
    if (mb->n_groups() == 0) mb->set_n_groups(1);
    if (mb->chunk() == 0) mb->set_chunk(128);
  }
  if (m->n_layer() <= 0) return Bad("model.n_layer must be > 0");
  if (m->n_embd() <= 0 || m->n_head() <= 0) return Bad("model.n_embd and model.n_head must be > 0");
  if (m->n_embd() % m->n_head() != 0) {
    return Bad(absl::StrCat("model.n_embd (", m->n_embd(), ") must be divisible by model.n_head (",
                            m->n_head(), ")"));
  }
  if (m->norm().empty()) m->set_norm("layernorm");
  if (auto e = ChoiceError("model.norm", m->norm()); !e.empty()) return Bad(e);
  if (m->activation().empty()) m->set_activation("gelu");
  if (auto e = ChoiceError("model.activation", m->activation()); !e.empty()) return Bad(e);
  if (m->init_std() == 0) m->set_init_std(0.02f);
  if (m->moe().num_experts() > 0) {
    auto* e = m->mutable_moe();
    if (e->top_k() == 0) e->set_top_k(2);
    if (e->every_n() == 0) e->set_every_n(1);
    if (e->topk_scaling() == 0) e->set_topk_scaling(1.0f);
    if (e->bias_update_rate() == 0) e->set_bias_update_rate(1e-3f);
    if (e->score().empty()) e->set_score("softmax");
    if (auto w = ChoiceError("model.moe.score", e->score()); !w.empty()) return Bad(w);
    if (e->aux_loss_type().empty()) e->set_aux_loss_type("lane");
    if (auto w = ChoiceError("model.moe.aux_loss_type", e->aux_loss_type()); !w.empty()) return Bad(w);
    if (e->dispatcher().empty()) e->set_dispatcher("alltoall");
    if (auto w = ChoiceError("model.moe.dispatcher", e->dispatcher()); !w.empty()) return Bad(w);
    if (!std::isfinite(e->capacity_factor()) || e->capacity_factor() < 0) {
      return Bad(absl::StrCat("model.moe.capacity_factor must be a finite number >= 0 (0: dropless), "
                              "got ", e->capacity_factor(), " (e.g. 1.25)"));
    }
    if (e->pad_to_capacity() && e->capacity_factor() <= 0) {
      return Bad("model.moe.pad_to_capacity needs model.moe.capacity_factor > 0");
    }
    if (e->drop_policy().empty()) e->set_drop_policy("probability");
    if (auto w = ChoiceError("model.moe.drop_policy", e->drop_policy()); !w.empty()) return Bad(w);
  } else if (m->moe().num_experts() < 0) {
    return Bad(absl::StrCat("model.moe.num_experts must be ≥ 0, got ", m->moe().num_experts()));
  }
  if (m->vocab_pad_multiple() == 0) m->set_vocab_pad_multiple(128);
  auto* p = r->mutable_parallel();
  if (p->world_size() == 0) p->set_world_size(1);
  // (A negative size said "world size unknown"; 1e8 tried to start 1e8 threads.)
  if (p->world_size() < 0 || p->world_size() > kMaxWorldSize) {
    return Bad(absl::StrCat("parallel.world_size must be in [1, ", kMaxWorldSize, "] (0: 1), got ",
                            p->world_size()));
  }
  if (p->tp() == 0) p->set_tp(1);
  if (p->tp_num_weight_shards() == 0) p->set_tp_num_weight_shards(p->tp());
  if (p->pp() == 0) p->set_pp(1);
  if (p->cp() == 0) p->set_cp(1);
  if (p->cp() > 1 && m->seq_len() % (2 * int64_t{p->cp()}) != 0) {
    return Bad(absl::StrCat("model.seq_len (", m->seq_len(), ") must be divisible by 2 × parallel.cp = ",
                            2 * int64_t{p->cp()}, " (each CP rank holds two load-balanced chunks)"));
  }
  if (p->vpp() == 0) p->set_vpp(1);
  if (p->pp() < 1 || p->vpp() < 1) return Bad("parallel.pp and parallel.vpp must be ≥ 1");
  if (p->vpp() > 1 && p->pp() == 1) return Bad("parallel.vpp > 1 needs parallel.pp > 1");
  // pp × vpp in 64 bits: two large settings overflowed int (tools/fuzz/config_fuzzer).
  const int64_t stages = int64_t{p->pp()} * p->vpp();
  if (p->pp_boundaries_size() > 0) {
    bool ok = p->pp_boundaries_size() == stages && p->pp_boundaries(0) == 0;
    for (int i = 1; ok && i < p->pp_boundaries_size(); ++i) {
      ok = p->pp_boundaries(i) > p->pp_boundaries(i - 1) && p->pp_boundaries(i) < m->n_layer();
    }
    if (!ok) {
      return Bad(absl::StrCat("parallel.pp_boundaries must be pp × vpp = ", stages,
                              " increasing first layers, starting at 0, below model.n_layer (",
                              m->n_layer(), ")"));
    }
  } else if (m->n_layer() % stages != 0) {
    return Bad(absl::StrCat("model.n_layer (", m->n_layer(), ") must be divisible by parallel.pp × "
                            "parallel.vpp = ", stages, " (or set parallel.pp_boundaries)"));
  }
  if (p->ep() == 0) p->set_ep(1);
  if (p->etp() == 0) p->set_etp(1);
  if (p->expert_tp_num_weight_shards() == 0) p->set_expert_tp_num_weight_shards(p->etp());
  if (m->moe().num_experts() == 0 && (p->ep() != 1 || p->expert_tp_num_weight_shards() != p->etp())) {
    return Bad("parallel.ep and parallel.expert_tp_num_weight_shards need an MoE model "
               "(model.moe.num_experts > 0)");
  }
  if (!(p->comm_timeout_s() >= 0) || p->comm_timeout_s() > 86400) {  // NaN too
    return Bad(absl::StrCat("parallel.comm_timeout_s must be between 0 (the backend's default) and "
                            "86400 seconds, got ", p->comm_timeout_s()));
  }
  if (auto e = ChoiceError("parallel.backend", p->backend()); !p->backend().empty() && !e.empty()) {
    return Bad(e);
  }
  GTP_RETURN_IF_ERROR(CheckOrder("parallel.order", p->order(), parallel::kDefaultOrder));
  GTP_RETURN_IF_ERROR(
      CheckOrder("parallel.expert_order", p->expert_order(), parallel::kDefaultExpertOrder));
  auto* d = r->mutable_data();
  if (d->source().empty()) d->set_source("corpus");
  if (auto e = ChoiceError("data.source", d->source()); !e.empty()) return Bad(e);
  if (d->source() == "indexed" && d->path().empty()) return Bad("data.source indexed needs data.path");
  // (It trained on the embedded corpus, the path unread.)
  if (d->source() != "indexed" && !d->path().empty()) {
    return Bad(absl::StrCat("data.path is read only with data.source=indexed, and data.source is ",
                            d->source(), ": set data.source=indexed to train on ", d->path(),
                            ", or drop data.path (data.path=)"));
  }
  if (d->source() == "corpus" && m->vocab_size() < 256)
    return Bad("data.source corpus is byte-level: model.vocab_size must be >= 256");
  if (d->tokenizer_vocab().empty() != d->tokenizer_merges().empty())
    return Bad("data.tokenizer_vocab and data.tokenizer_merges go together");
  if (!d->tokenizer_vocab().empty() && d->source() != "indexed")
    return Bad("data.tokenizer_vocab/merges describe an indexed dataset (data.source indexed)");
  if (!d->tokenizer_json().empty() && !d->tokenizer_vocab().empty())
    return Bad("data.tokenizer_json and data.tokenizer_vocab/merges both name the dataset's tokenizer: set one");
  if (!d->tokenizer_json().empty() && d->source() != "indexed")
    return Bad("data.tokenizer_json describes an indexed dataset (data.source indexed)");
  if (!d->tokenizer_model().empty() && (!d->tokenizer_vocab().empty() || !d->tokenizer_json().empty()))
    return Bad(absl::StrCat("data.tokenizer_model and data.",
                            d->tokenizer_json().empty() ? "tokenizer_vocab/merges" : "tokenizer_json",
                            " both name the dataset's tokenizer: set one"));
  if (!d->tokenizer_model().empty() && d->source() != "indexed")
    return Bad("data.tokenizer_model describes an indexed dataset (data.source indexed)");
  if (!std::isfinite(d->valid_fraction()) || d->valid_fraction() < 0 || d->valid_fraction() > 0.5f)
    return Bad(absl::StrCat("data.valid_fraction must be in (0, 0.5] (0: 0.02), got ", d->valid_fraction()));
  if (d->valid_fraction() != 0 && d->source() == "corpus")
    return Bad("data.valid_fraction applies to mock and indexed data; the embedded corpus has its own split");
  if (d->valid_fraction() == 0 && d->source() != "corpus") d->set_valid_fraction(0.02f);
  auto* o = r->mutable_optim();
  if (o->matrices().empty()) o->set_matrices("adamw");
  if (auto e = ChoiceError("optim.matrices", o->matrices()); !e.empty()) return Bad(e);
  // Finite and in range, or the run is refused: optim.lr=inf used to train
  // with every step skipped and save NaN weights, exit 0.
  auto finite = [](float v) { return std::isfinite(v); };
  if (!finite(o->lr()) || o->lr() <= 0)
    return Bad(absl::StrCat("optim.lr must be a finite number > 0, got ", o->lr(), " (e.g. 3e-4)"));
  if (!finite(o->min_lr()) || o->min_lr() < 0 || o->min_lr() > o->lr()) {
    return Bad(absl::StrCat("optim.min_lr must be in [0, optim.lr = ", o->lr(), "], got ",
                            o->min_lr(), " (e.g. optim.lr / 10)"));
  }
  if (o->warmup_steps() < 0)
    return Bad(absl::StrCat("optim.warmup_steps must be >= 0, got ", o->warmup_steps()));
  if (o->decay_steps() < 0)
    return Bad(absl::StrCat("optim.decay_steps must be >= 0 (0: train.steps), got ", o->decay_steps()));
  if (!finite(o->weight_decay()) || o->weight_decay() < 0) {
    return Bad(absl::StrCat("optim.weight_decay must be a finite number >= 0, got ",
                            o->weight_decay(), " (e.g. 0.1)"));
  }
  for (const auto& [name, v] : {std::pair<const char*, float>{"beta1", o->beta1()},
                                {"beta2", o->beta2()}}) {
    // 0 takes the default below; otherwise a decay rate in (0, 1).
    if (!finite(v) || v < 0 || v >= 1) {
      return Bad(absl::StrCat("optim.", name, " must be in [0, 1) (0: the default), got ", v,
                              " (e.g. 0.9 and 0.95)"));
    }
  }
  if (!finite(o->clip_grad()) || o->clip_grad() < 0) {
    return Bad(absl::StrCat("optim.clip_grad must be a finite number >= 0 (0: no clipping), got ",
                            o->clip_grad(), " (e.g. 1.0)"));
  }
  if (o->decay().empty()) o->set_decay("cosine");
  if (auto e = ChoiceError("optim.decay", o->decay()); !e.empty()) return Bad(e);
  if (o->beta1() == 0) o->set_beta1(0.9f);
  if (o->beta2() == 0) o->set_beta2(0.95f);
  auto* t = r->mutable_train();
  if (t->steps() <= 0) return Bad("train.steps must be > 0");
  if (t->micro_batch() <= 0) return Bad("train.micro_batch must be > 0");
  if (t->log_every() <= 0) t->set_log_every(1);
  if (t->eval_batches() <= 0) t->set_eval_batches(4);
  if (t->max_skipped_steps() <= 0) t->set_max_skipped_steps(10);
  if (t->device().empty()) t->set_device("cpu");
  if (auto e = ChoiceError("train.device", t->device()); !e.empty()) return Bad(e);
  if (t->precision().empty()) t->set_precision(t->device() == "cuda" ? "bf16" : "f32");
  if (auto e = ChoiceError("train.precision", t->precision()); !e.empty()) return Bad(e);
  if (!t->fp8_wgrad().empty() && t->precision() != "fp8") {
    return Bad(absl::StrCat("train.fp8_wgrad=", t->fp8_wgrad(),
                            " applies to train.precision=fp8 only, got precision ",
                            t->precision(), "; drop it or set train.precision=fp8"));
  }
  if (t->precision() == "fp8" && t->fp8_wgrad().empty()) t->set_fp8_wgrad("fp8");
  if (auto e = ChoiceError("train.fp8_wgrad", t->fp8_wgrad()); !t->fp8_wgrad().empty() && !e.empty()) {
    return Bad(e);
  }
  if (!t->fp8_gemm().empty() && t->precision() != "fp8") {
    return Bad(absl::StrCat("train.fp8_gemm=", t->fp8_gemm(),
                            " applies to train.precision=fp8 only, got precision ", t->precision(),
                            "; drop it or set train.precision=fp8"));
  }
  if (t->precision() == "fp8" && t->fp8_gemm().empty()) t->set_fp8_gemm("cublaslt");
  if (auto e = ChoiceError("train.fp8_gemm", t->fp8_gemm()); !t->fp8_gemm().empty() && !e.empty()) {
    return Bad(e);
  }
  for (const auto& [name, n] :
       {std::pair<const char*, int>{"train.fp8_bf16_first_layers", t->fp8_bf16_first_layers()},
        {"train.fp8_bf16_last_layers", t->fp8_bf16_last_layers()}}) {
    if (n != 0 && t->precision() != "fp8") {
      return Bad(absl::StrCat(name, "=", n, " applies to train.precision=fp8 only, got precision ",
                              t->precision(), "; drop it or set train.precision=fp8"));
    }
    if (n < 0) return Bad(absl::StrCat(name, " must be >= 0 (0: every layer in fp8), got ", n));
  }
  if (int64_t{t->fp8_bf16_first_layers()} + t->fp8_bf16_last_layers() > m->n_layer()) {
    return Bad(absl::StrCat("train.fp8_bf16_first_layers (", t->fp8_bf16_first_layers(),
                            ") + train.fp8_bf16_last_layers (", t->fp8_bf16_last_layers(),
                            ") exceed model.n_layer (", m->n_layer(),
                            "); e.g. 1 and 1, or train.precision=bf16 for no fp8 layer"));
  }
  if (t->fp8_gemm() == "wgmma" && t->device() != "cuda") {
    return Bad(absl::StrCat(
        "train.fp8_gemm=wgmma runs on CUDA only (a Hopper GPU), got train.device=", t->device(),
        "; drop it (the CPU runs the reference GEMM)"));
  }
  if (t->precision() == "fp8") {
    // bf16 training with the linears' GEMMs in block-scaled FP8
    // (core/kernels/fp8): cuBLASLt's FP8 GEMM on Hopper (world.cc checks the
    // GPU), rows of 16 bytes; on the CPU the reference GEMMs (exact to their
    // definition, slow: for tests and small models), under the same rules.
    const int64_t rows = int64_t{t->micro_batch()} * m->seq_len() / std::max(1, p->cp());
    if (rows % 16 != 0) {
      return Bad(absl::StrCat("train.precision=fp8 needs train.micro_batch × model.seq_len / "
                              "parallel.cp (the GEMMs' rows) to be a multiple of 16, got ",
                              rows, "; e.g. a seq_len that is a multiple of 16, or precision bf16"));
    }
  }
  {
    const std::string params = t->precision() == "f32" ? "f32" : "bf16";
    const std::string& g = r->parallel().gtp_gather_dtype();
    if (!g.empty() && g != "fp8" && g != "nvfp4" && g != "fp8_tiles" && g != params) {
      return Bad(absl::StrCat("parallel.gtp_gather_dtype must be fp8, nvfp4, fp8_tiles or the ",
                              "params' dtype (", params, "), got ", g));
    }
    if (g == "fp8_tiles" && t->precision() != "fp8") {
      return Bad(absl::StrCat("parallel.gtp_gather_dtype=fp8_tiles gathers the FP8 GEMMs' weights "
                              "as their own 128x128 tiles: it needs train.precision=fp8, got ",
                              t->precision(), "; for an 8-bit gather of any weight use fp8"));
    }
    // fp8_tiles on cuda: its gathers over NCCL matched one rank with the same
    // gather on an H100 (2026-12-07, tools/bench/nccl_parity.sh with GTP_SET;
    // docs/PERFORMANCE.md, the thirty-fourth session).
    // NVFP4 on cuda: the codec's CUDA kernels match the CPU byte for byte on
    // an H200 (core/kernels:nvfp4_gpu_test, 2026-12-04), and its gathers over
    // NCCL matched one rank with the same gather on an H100 at bf16, rate
    // 3e-4 (2026-12-07: GTP2, TP2·GTP2 and GTP4 within the noise-derived
    // tolerance; docs/PERFORMANCE.md, the thirty-fifth session). At the
    // small model's usual 1e-3 NVFP4 spikes on one rank as on many (the
    // format, not the path). Other precisions on cuda have not run it over
    // NCCL, so they are refused.
    if (g == "nvfp4" && t->device() == "cuda" && t->precision() != "bf16") {
      return Bad(absl::StrCat("parallel.gtp_gather_dtype=nvfp4 on cuda runs under ",
                              "train.precision=bf16 (the precision its NCCL runs were checked ",
                              "at), got ", t->precision(), "; use bf16, or on cuda use fp8 or ",
                              "the params' dtype"));
    }
  }
  {
    const std::string& g = r->parallel().gtp_reduce_scatter_dtype();
    if (auto e = ChoiceError("parallel.gtp_reduce_scatter_dtype", g); !g.empty() && !e.empty()) {
      return Bad(e);
    }
  }
  if (t->cuda_graphs().empty()) t->set_cuda_graphs("auto");
  if (auto e = ChoiceError("train.cuda_graphs", t->cuda_graphs()); !e.empty()) return Bad(e);
  if (t->attention().empty()) t->set_attention("cudnn");
  if (auto e = ChoiceError("train.attention", t->attention()); !e.empty()) return Bad(e);
  if (t->pack_projections().empty()) t->set_pack_projections("auto");
  if (auto e = ChoiceError("train.pack_projections", t->pack_projections()); !e.empty())
    return Bad(e);
  if (t->pack_projections() == "on" && (t->precision() != "bf16" || p->cp() > 1)) {
    return Bad(absl::StrCat(
        "train.pack_projections=on packs q, k and v for the bf16 fused attention: it needs "
        "train.precision=bf16 (got ",
        t->precision(), ") and parallel.cp=1 (got ", p->cp(),
        "); use train.pack_projections=auto (packs where it can) or off"));
  }
  auto* c = r->mutable_checkpoint();
  if (c->dir().empty()) c->set_dir("checkpoints");
  if (c->disable()) {
    for (const auto& [name, set] :
         {std::pair<const char*, bool>{"checkpoint.every", c->every() > 0},
          {"checkpoint.save_initial", c->save_initial()},
          {"checkpoint.async_save", c->async_save()}}) {
      if (set) {
        return Bad(absl::StrCat("checkpoint.disable=true writes no checkpoint, but ", name,
                                " asks for one; drop one of the two"));
      }
    }
  }
  // The checkpoints belong to the run directory (its lock covers them): an
  // absolute path used to land nested under the run dir, unannounced.
  if (c->dir().front() == '/' ||
      absl::StrContains(absl::StrCat("/", c->dir(), "/"), "/../")) {
    return Bad(absl::StrCat("checkpoint.dir is a path inside the run directory, got ", c->dir(),
                            ": use e.g. checkpoint.dir=checkpoints and choose where the run "
                            "goes with --run_dir"));
  }
  if (c->keep_last() < 0) return Bad(absl::StrCat("checkpoint.keep_last must be >= 0 (0: 2), got ", c->keep_last()));
  if (c->keep_last() == 0) c->set_keep_last(2);
  if (r->name().empty()) r->set_name("run");
  return absl::OkStatus();
}

std::vector<std::string> TakeSets(int* argc, char** argv) {
  std::vector<std::string> sets;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {  // the rest is positional: keep it for the caller's check
      for (; i < *argc; ++i) argv[out++] = argv[i];
      break;
    }
    if ((a == "--set" || a == "-set") && i + 1 < *argc) {
      for (absl::string_view v : absl::StrSplit(argv[++i], ',', absl::SkipEmpty())) sets.emplace_back(v);
      continue;
    }
    if (a.rfind("--set=", 0) == 0 || a.rfind("-set=", 0) == 0) {
      for (absl::string_view v : absl::StrSplit(a.substr(a.find('=') + 1), ',', absl::SkipEmpty())) {
        sets.emplace_back(v);
      }
      continue;
    }
    argv[out++] = argv[i];
  }
  *argc = out;
  return sets;
}

std::string RecipeText(const proto::Recipe& r) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(r, &out);
  return out;
}

bool ProgressFlagGiven(int argc, char** argv) {
  bool given = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    given |= absl::StartsWith(a, "--progress") || absl::StartsWith(a, "--noprogress") ||
             absl::StartsWith(a, "-progress") || absl::StartsWith(a, "-noprogress");
  }
  return given;
}

std::string StrayArgumentError(const std::vector<char*>& positional) {
  if (positional.size() <= 1) return "";
  const std::string arg = positional[1];
  return absl::StrCat("error: unexpected argument '", arg, "'",
                      arg.find('=') != std::string::npos
                          ? absl::StrCat(": settings go after --set (--set ", arg, ")")
                          : ": the trainer takes only flags (--config, --set, --run_dir, --progress)");
}

}  // namespace gtp::recipes
