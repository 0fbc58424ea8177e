#include "recipes/vlm_mimo/config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "google/protobuf/text_format.h"
#include "recipes/trainer/config.h"

namespace gtp::recipes::vlm {

extern const char kVlmConfigProtoText[];  // vlm_config.proto (genrule)
extern const char kVlmDefaultConfig[];    // vlm_mimo.pbtxt (genrule)

namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

const std::vector<Choice>& VlmChoices() {
  static const std::vector<Choice>* const kChoices = new std::vector<Choice>{
      {"parallel.backend", {"local", "ucx"}},
      {"optim.matrices", {"adamw", "muon"}},
      {"optim.decay", {"cosine", "linear", "constant"}},
      {"train.device", {"cpu", "cuda"}},
  };
  return *kChoices;
}

absl::Status Choice(const std::string& key, const std::string& value) {
  const std::string e = ChoiceError(Schema(), key, value);
  return e.empty() ? absl::OkStatus() : Bad(e);
}

// "parallel.encoder" / "parallel.language" with its grid.
struct Module {
  const char* name;
  const Grid* grid;
};

}  // namespace

SettingsSchema Schema() { return {VlmRecipe::descriptor(), kVlmConfigProtoText, &VlmChoices()}; }

absl::StatusOr<VlmRecipe> LoadVlmRecipe(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  VlmRecipe r;
  if (path.empty()) {
    GTP_RETURN_IF_ERROR(ParseConfig(kVlmDefaultConfig, kDefaultConfigPath, &r));
  } else {
    GTP_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(path));
    GTP_RETURN_IF_ERROR(ParseConfig(text, path, &r));
  }
  GTP_RETURN_IF_ERROR(ApplyOverrides(overrides, Schema(), &r));
  GTP_RETURN_IF_ERROR(FinalizeVlmRecipe(&r));
  return r;
}

absl::Status FinalizeVlmRecipe(VlmRecipe* r) {
  // Negative and non-finite numbers first: 0 means "the default" below,
  // and a negative one must not become it silently.
  GTP_RETURN_IF_ERROR(CheckNumbers(*r));
  if (r->name().empty()) r->set_name("vlm_mimo");
  auto* m = r->mutable_model();
  if (m->image_size() == 0) m->set_image_size(16);
  if (m->patch() == 0) m->set_patch(4);
  if (m->width() == 0) m->set_width(64);
  if (m->layers() == 0) m->set_layers(2);
  if (m->heads() == 0) m->set_heads(4);
  if (m->image_size() < 8 || m->image_size() % m->patch() != 0) {
    return Bad(absl::StrCat("model.image_size (", m->image_size(),
                            ") must be ≥ 8 and a multiple of "
                            "model.patch (",
                            m->patch(), ")"));
  }
  if (m->image_size() > 1024)
    return Bad(absl::StrCat("model.image_size must be ≤ 1024, got ", m->image_size()));
  if (m->width() % m->heads() != 0) {
    return Bad(absl::StrCat("model.width (", m->width(), ") must be divisible by model.heads (",
                            m->heads(), ")"));
  }
  auto* p = r->mutable_parallel();
  for (Grid* g : {p->mutable_encoder(), p->mutable_language()}) {
    if (g->ranks() == 0) g->set_ranks(1);
    if (g->tp() == 0) g->set_tp(1);
    if (g->gtp() == 0) g->set_gtp(1);
  }
  if (int64_t{p->encoder().ranks()} + p->language().ranks() > kMaxWorldSize) {
    return Bad(
        absl::StrCat("parallel.encoder.ranks + parallel.language.ranks must be ≤ ", kMaxWorldSize));
  }
  if (!p->backend().empty()) GTP_RETURN_IF_ERROR(Choice("parallel.backend", p->backend()));
  if (p->comm_timeout_s() > 86400) {
    return Bad(absl::StrCat("parallel.comm_timeout_s must be at most 86400 seconds, got ",
                            p->comm_timeout_s()));
  }
  auto* o = r->mutable_optim();
  if (o->matrices().empty()) o->set_matrices("adamw");
  GTP_RETURN_IF_ERROR(Choice("optim.matrices", o->matrices()));
  if (o->decay().empty()) o->set_decay("cosine");
  GTP_RETURN_IF_ERROR(Choice("optim.decay", o->decay()));
  if (o->lr() <= 0)
    return Bad(absl::StrCat("optim.lr must be a finite number > 0, got ", o->lr(), " (e.g. 1e-2)"));
  if (o->min_lr() > o->lr()) {
    return Bad(absl::StrCat("optim.min_lr must be at most optim.lr = ", o->lr(), ", got ",
                            o->min_lr(), " (0: optim.lr / 10)"));
  }
  for (const auto& [name, v] :
       {std::pair<const char*, float>{"beta1", o->beta1()}, {"beta2", o->beta2()}}) {
    if (v >= 1)
      return Bad(absl::StrCat("optim.", name, " must be in [0, 1) (0: the default), got ", v));
  }
  auto* t = r->mutable_train();
  if (t->steps() <= 0) return Bad("train.steps must be > 0");
  if (t->global_batch() <= 0) return Bad("train.global_batch must be > 0");
  if (o->decay_steps() > 0 && o->decay() != "constant" &&
      o->decay_steps() < std::min(o->warmup_steps(), t->steps())) {
    return Bad(absl::StrCat("optim.decay_steps (", o->decay_steps(),
                            ") must be at least optim.warmup_steps (", o->warmup_steps(), ")"));
  }
  if (t->log_every() == 0) t->set_log_every(1);
  if (t->device().empty()) t->set_device("cpu");
  GTP_RETURN_IF_ERROR(Choice("train.device", t->device()));
  auto* c = r->mutable_checkpoint();
  if (c->dir().empty()) c->set_dir("checkpoints");
  // The checkpoints belong to the run directory (its lock covers them).
  if (c->dir().front() == '/' || absl::StrContains(absl::StrCat("/", c->dir(), "/"), "/../")) {
    return Bad(absl::StrCat("checkpoint.dir is a path inside the run directory, got ", c->dir(),
                            ": use e.g. checkpoint.dir=checkpoints and choose where the run goes "
                            "with --run_dir"));
  }
  if (c->keep_last() == 0) c->set_keep_last(2);
  return absl::OkStatus();
}

int WorldSize(const VlmRecipe& r) {
  const auto& p = r.parallel();
  return p.colocated() ? p.language().ranks() : p.encoder().ranks() + p.language().ranks();
}

parallel::ParallelConfig GridConfig(const Grid& g) {
  parallel::ParallelConfig pc;
  pc.tp = g.tp();
  pc.tp_num_weight_shards = g.tp() * g.gtp();
  return pc;
}

int DataLanes(const Grid& g) { return g.ranks() / g.tp(); }

absl::Status CheckVlmLayout(const VlmRecipe& r) {
  const auto& p = r.parallel();
  if (p.colocated() && p.encoder().ranks() != p.language().ranks()) {
    return Bad(absl::StrCat("parallel.colocated needs parallel.encoder.ranks (",
                            p.encoder().ranks(), ") = parallel.language.ranks (",
                            p.language().ranks(), ")"));
  }
  const int64_t heads = r.model().heads();
  for (const Module& m :
       {Module{"parallel.encoder", &p.encoder()}, Module{"parallel.language", &p.language()}}) {
    const Grid& g = *m.grid;
    if (heads % g.tp() != 0) {
      return Bad(absl::StrCat(m.name, ".tp (", g.tp(), ") must divide model.heads (", heads,
                              "): tensor parallelism splits the heads"));
    }
    if (g.ranks() % (int64_t{g.tp()} * g.gtp()) != 0) {
      return Bad(absl::StrCat(m.name, ".tp × ", m.name, ".gtp = ", int64_t{g.tp()} * g.gtp(),
                              " must divide ", m.name, ".ranks (", g.ranks(), ")"));
    }
    parallel::ModelFacts facts;
    facts.num_attention_heads = static_cast<int>(heads);
    if (absl::Status st = GridConfig(g).Validate(g.ranks(), facts); !st.ok()) {
      return Bad(absl::StrCat(m.name, ": ", st.message()));
    }
  }
  const int S = DataLanes(p.encoder()), D = DataLanes(p.language());
  const int64_t G = r.train().global_batch();
  if (G % D != 0) {
    return Bad(absl::StrCat("train.global_batch (", G,
                            ") must be divisible by the language grid's ", D,
                            " data lanes (parallel.language.ranks / parallel.language.tp)"));
  }
  if (G % S != 0) {
    return Bad(absl::StrCat("train.global_batch (", G, ") must be divisible by the encoder grid's ",
                            S, " data lanes (parallel.encoder.ranks / parallel.encoder.tp)"));
  }
  if (S % D != 0 && D % S != 0) {
    return Bad(absl::StrCat("the encoder grid's ", S, " data lanes and the language grid's ", D,
                            " must divide one another (the bridge fans lanes in or out)"));
  }
  return absl::OkStatus();
}

std::string VlmRecipeText(const VlmRecipe& r) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(r, &out);
  return out;
}

data::shapes::ShapesConfig ShapesConfigOf(const VlmRecipe& r) {
  return {r.model().image_size(), r.model().patch(), r.train().seed()};
}

mimo::MimoConfig MimoConfigOf(const VlmRecipe& r, const data::shapes::ShapesTask& task) {
  const auto& m = r.model();
  mimo::MimoConfig mc;
  mc.encoder.patch_dim = task.patch_dim();
  mc.encoder.num_patches = task.num_patches();
  mc.encoder.n_layer = m.layers();
  mc.encoder.block.n_embd = m.width();
  mc.encoder.block.n_head = m.heads();
  mc.encoder.block.seed = r.train().seed();
  mc.language = layers::GptConfig::Gpt2(data::shapes::ShapesTask::vocab_size(),
                                        task.sequence_length(), m.layers(), m.width(), m.heads());
  mc.language.block.seed = r.train().seed() + 1;
  return mc;
}

optimizer::OptimizerConfig OptimConfigOf(const VlmRecipe& r) {
  const auto& o = r.optim();
  const int64_t steps = r.train().steps();
  optimizer::OptimizerConfig c;
  if (o.matrices() == "muon") c.matrices = optimizer::MatrixOptimizer::kMuon;
  c.lr.decay = o.decay() == "cosine"   ? optimizer::LrDecay::kCosine
               : o.decay() == "linear" ? optimizer::LrDecay::kLinear
                                       : optimizer::LrDecay::kConstant;
  c.lr.max_lr = o.lr();
  // (In f32 as the recipe always did: lr / 10 is not the float nearest 1e-3.)
  c.lr.min_lr = o.min_lr() > 0 ? o.min_lr() : c.lr.max_lr / 10;
  c.lr.warmup_steps = std::min(o.warmup_steps(), steps);
  c.lr.decay_steps = o.decay_steps() > 0 ? o.decay_steps() : steps;
  c.clip_grad = o.clip_grad();
  if (o.beta1() > 0) c.adamw.beta1 = o.beta1();
  c.adamw.beta2 = o.beta2() > 0 ? o.beta2() : 0.95f;
  c.adamw.weight_decay = o.weight_decay();
  return c;
}

proto::Recipe TrainerRecipe(const VlmRecipe& r) {
  proto::Recipe t;
  t.set_name(r.name());
  t.mutable_parallel()->set_world_size(WorldSize(r));
  t.mutable_parallel()->set_backend(r.parallel().backend());
  t.mutable_parallel()->set_comm_timeout_s(r.parallel().comm_timeout_s());
  t.mutable_train()->set_device(r.train().device());
  t.mutable_train()->set_precision("f32");
  t.mutable_train()->set_attention("flash");
  t.mutable_train()->set_steps(r.train().steps());
  t.mutable_train()->set_log_every(r.train().log_every());
  t.mutable_train()->set_tensorboard_dir(r.train().tensorboard_dir());
  t.mutable_train()->set_global_batch(r.train().global_batch());
  return t;
}

absl::Status CanResume(const VlmRecipe& theirs, const VlmRecipe& ours, const std::string& dir) {
  auto differ = [&](const std::string& key, const std::string& a, const std::string& b,
                    const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume ", dir, ": ", key, " is ", a, " there but ", b,
                     " in this run (", why, "); keep ", key, "=", a,
                     ", or start afresh with checkpoint.no_resume=true or another --run_dir"));
  };
  // The model, field by field.
  const google::protobuf::Message& tm = theirs.model();
  const google::protobuf::Message& om = ours.model();
  const google::protobuf::Descriptor* d = tm.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    std::string a, b;
    google::protobuf::TextFormat::PrintFieldValueToString(tm, d->field(i), -1, &a);
    google::protobuf::TextFormat::PrintFieldValueToString(om, d->field(i), -1, &b);
    if (a != b) {
      return differ(absl::StrCat("model.", d->field(i)->name()), a, b,
                    "a checkpoint's weights fit only the model they were trained as");
    }
  }
  if (theirs.train().seed() != ours.train().seed()) {
    return differ("train.seed", absl::StrCat(theirs.train().seed()),
                  absl::StrCat(ours.train().seed()), "the seed picks the images of every step");
  }
  if (theirs.optim().matrices() != ours.optim().matrices()) {
    return differ("optim.matrices", theirs.optim().matrices(), ours.optim().matrices(),
                  "AdamW's moments are not Muon's momentum");
  }
  const optimizer::LrSchedule a = OptimConfigOf(theirs).lr, b = OptimConfigOf(ours).lr;
  const auto& to = theirs.optim();
  const auto& oo = ours.optim();
  const char* why = "the learning-rate schedule would jump";
  if (to.decay() != oo.decay()) return differ("optim.decay", to.decay(), oo.decay(), why);
  if (a.max_lr != b.max_lr)
    return differ("optim.lr", absl::StrCat(to.lr()), absl::StrCat(oo.lr()), why);
  if (a.min_lr != b.min_lr) {
    return differ("optim.min_lr", absl::StrCat(to.min_lr()), absl::StrCat(oo.min_lr()), why);
  }
  if (a.warmup_steps != b.warmup_steps) {
    return differ("optim.warmup_steps", absl::StrCat(to.warmup_steps()),
                  absl::StrCat(oo.warmup_steps()), why);
  }
  if (a.decay_steps != b.decay_steps && a.decay != optimizer::LrDecay::kConstant) {
    if (to.decay_steps() == oo.decay_steps()) {  // 0 both: train.steps decides
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot resume ", dir, ": its learning rate decays over train.steps = ",
          theirs.train().steps(), " steps but this run's train.steps is ", ours.train().steps(),
          " (the schedule would jump): to continue past it, set optim.decay_steps=",
          theirs.train().steps(), " (the rate stays at its minimum after)"));
    }
    return differ("optim.decay_steps", absl::StrCat(a.decay_steps), absl::StrCat(b.decay_steps),
                  why);
  }
  return absl::OkStatus();
}

}  // namespace gtp::recipes::vlm
