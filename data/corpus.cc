#include "data/corpus.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"
#include "data/internal/corpus_text.h"

namespace gtp::data {
namespace {

// ---- lexicon ------------------------------------------------------------------

struct Noun {
  const char* sg;
  const char* pl;
};
struct Verb {  // base, third person singular, past
  const char* base;
  const char* s;
  const char* past;
};
template <typename T>
struct List {
  const T* items;
  size_t size;
};
template <typename T, size_t N>
constexpr List<T> ListOf(const T (&arr)[N]) {
  return {arr, N};
}

struct Topic {
  const char* place;  // "the workshop"
  List<Noun> nouns;
  List<Verb> verbs;  // transitive
  List<const char*> adjectives;
};

const Noun kComputeNouns[] = {{"gpu", "gpus"},           {"kernel", "kernels"},
                              {"tensor", "tensors"},     {"rank", "ranks"},
                              {"gradient", "gradients"}, {"buffer", "buffers"},
                              {"stream", "streams"},     {"batch", "batches"},
                              {"shard", "shards"},       {"checkpoint", "checkpoints"},
                              {"layer", "layers"},       {"node", "nodes"},
                              {"weight", "weights"},     {"optimizer", "optimizers"},
                              {"queue", "queues"}};
const Verb kComputeVerbs[] = {{"gather", "gathers", "gathered"},
                              {"reduce", "reduces", "reduced"},
                              {"scatter", "scatters", "scattered"},
                              {"compute", "computes", "computed"},
                              {"load", "loads", "loaded"},
                              {"save", "saves", "saved"},
                              {"split", "splits", "split"},
                              {"copy", "copies", "copied"},
                              {"send", "sends", "sent"},
                              {"receive", "receives", "received"},
                              {"update", "updates", "updated"},
                              {"check", "checks", "checked"}};
const char* const kComputeAdjectives[] = {"sharded", "idle",   "busy",  "fast",  "slow", "large",
                                          "small",   "remote", "local", "stale", "warm", "empty"};

const Noun kGardenNouns[] = {{"gardener", "gardeners"}, {"seed", "seeds"},   {"rose", "roses"},
                             {"tree", "trees"},         {"path", "paths"},   {"spade", "spades"},
                             {"bee", "bees"},           {"leaf", "leaves"},  {"bed", "beds"},
                             {"fence", "fences"},       {"apple", "apples"}, {"hedge", "hedges"}};
const Verb kGardenVerbs[] = {{"plant", "plants", "planted"}, {"water", "waters", "watered"},
                             {"prune", "prunes", "pruned"},  {"trim", "trims", "trimmed"},
                             {"grow", "grows", "grew"},      {"watch", "watches", "watched"},
                             {"dig", "digs", "dug"},         {"carry", "carries", "carried"},
                             {"pick", "picks", "picked"}};
const char* const kGardenAdjectives[] = {"green", "tall",   "quiet", "wild",  "old",
                                         "young", "bright", "wet",   "sweet", "tangled"};

const Noun kTownNouns[] = {{"boat", "boats"},     {"bridge", "bridges"}, {"fisher", "fishers"},
                           {"miller", "millers"}, {"market", "markets"}, {"street", "streets"},
                           {"lamp", "lamps"},     {"dog", "dogs"},       {"child", "children"},
                           {"river", "rivers"},   {"cart", "carts"},     {"inn", "inns"}};
const Verb kTownVerbs[] = {
    {"cross", "crosses", "crossed"},   {"sell", "sells", "sold"},    {"buy", "buys", "bought"},
    {"follow", "follows", "followed"}, {"build", "builds", "built"}, {"paint", "paints", "painted"},
    {"mend", "mends", "mended"},       {"find", "finds", "found"},   {"pull", "pulls", "pulled"}};
const char* const kTownAdjectives[] = {"narrow",  "busy", "old",    "cold",  "distant",
                                       "crowded", "red",  "wooden", "muddy", "cheerful"};

const Noun kKitchenNouns[] = {{"cook", "cooks"},   {"pot", "pots"},       {"knife", "knives"},
                              {"loaf", "loaves"},  {"oven", "ovens"},     {"bowl", "bowls"},
                              {"spoon", "spoons"}, {"recipe", "recipes"}, {"table", "tables"},
                              {"onion", "onions"}, {"kettle", "kettles"}, {"plate", "plates"}};
const Verb kKitchenVerbs[] = {
    {"cut", "cuts", "cut"},        {"stir", "stirs", "stirred"},  {"bake", "bakes", "baked"},
    {"taste", "tastes", "tasted"}, {"wash", "washes", "washed"},  {"fill", "fills", "filled"},
    {"heat", "heats", "heated"},   {"serve", "serves", "served"}, {"slice", "slices", "sliced"}};
const char* const kKitchenAdjectives[] = {"hot",   "warm",  "sharp",  "clean", "full",
                                          "empty", "fresh", "bitter", "heavy", "golden"};

const Noun kSeaNouns[] = {{"sailor", "sailors"}, {"ship", "ships"},        {"star", "stars"},
                          {"wave", "waves"},     {"storm", "storms"},      {"island", "islands"},
                          {"map", "maps"},       {"compass", "compasses"}, {"harbour", "harbours"},
                          {"gull", "gulls"},     {"rope", "ropes"},        {"sail", "sails"}};
const Verb kSeaVerbs[] = {{"sail", "sails", "sailed"},        {"chart", "charts", "charted"},
                          {"steer", "steers", "steered"},     {"reach", "reaches", "reached"},
                          {"leave", "leaves", "left"},        {"watch", "watches", "watched"},
                          {"signal", "signals", "signalled"}, {"tie", "ties", "tied"},
                          {"lower", "lowers", "lowered"}};
const char* const kSeaAdjectives[] = {"dark",  "calm",     "grey",  "bright", "far",
                                      "salty", "restless", "broad", "stormy", "silent"};

const Noun kLibraryNouns[] = {{"reader", "readers"}, {"book", "books"},     {"page", "pages"},
                              {"shelf", "shelves"},  {"clerk", "clerks"},   {"letter", "letters"},
                              {"story", "stories"},  {"author", "authors"}, {"index", "indexes"},
                              {"map", "maps"},       {"desk", "desks"},     {"note", "notes"}};
const Verb kLibraryVerbs[] = {
    {"read", "reads", "read"},    {"write", "writes", "wrote"}, {"lend", "lends", "lent"},
    {"sort", "sorts", "sorted"},  {"open", "opens", "opened"},  {"close", "closes", "closed"},
    {"copy", "copies", "copied"}, {"keep", "keeps", "kept"},    {"borrow", "borrows", "borrowed"}};
const char* const kLibraryAdjectives[] = {"quiet", "dusty",   "thick",  "rare", "heavy",
                                          "thin",  "careful", "yellow", "long", "forgotten"};

const Topic kTopics[] = {
    {"the machine room", ListOf(kComputeNouns), ListOf(kComputeVerbs), ListOf(kComputeAdjectives)},
    {"the garden", ListOf(kGardenNouns), ListOf(kGardenVerbs), ListOf(kGardenAdjectives)},
    {"the river town", ListOf(kTownNouns), ListOf(kTownVerbs), ListOf(kTownAdjectives)},
    {"the kitchen", ListOf(kKitchenNouns), ListOf(kKitchenVerbs), ListOf(kKitchenAdjectives)},
    {"the harbour", ListOf(kSeaNouns), ListOf(kSeaVerbs), ListOf(kSeaAdjectives)},
    {"the library", ListOf(kLibraryNouns), ListOf(kLibraryVerbs), ListOf(kLibraryAdjectives)},
};
constexpr size_t kNumTopics = sizeof(kTopics) / sizeof(kTopics[0]);

const char* const kNames[] = {"Ada",  "Boris", "Chen",  "Dara", "Emil", "Farah", "Goran",
                              "Hana", "Ines",  "Jonas", "Kofi", "Lena", "Mara",  "Nico",
                              "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tomas", "Uma",
                              "Vera", "Wen",   "Yusuf", "Zofia"};
const Verb kIntransitive[] = {{"wait", "waits", "waited"},    {"rest", "rests", "rested"},
                              {"sleep", "sleeps", "slept"},   {"return", "returns", "returned"},
                              {"work", "works", "worked"},    {"listen", "listens", "listened"},
                              {"begin", "begins", "began"},   {"stop", "stops", "stopped"},
                              {"laugh", "laughs", "laughed"}, {"arrive", "arrives", "arrived"},
                              {"run", "runs", "ran"},         {"sing", "sings", "sang"}};
const char* const kAdverbs[] = {"slowly",   "quickly", "carefully",      "again",
                                "often",    "rarely",  "quietly",        "twice",
                                "together", "at last", "without a word", "all day"};
const char* const kTimes[] = {"in the morning", "at night",  "every day",   "after the rain",
                              "before noon",    "on Sunday", "in winter",   "by evening",
                              "that year",      "at dawn",   "once a week", "in the spring"};
const char* const kPrepositions[] = {"near",  "behind",  "under", "beside", "across", "inside",
                                     "above", "without", "after", "before", "with",   "from"};
const char* const kSubordinators[] = {"When",   "Because", "While",    "After",
                                      "Before", "If",      "Although", "Until"};
const char* const kConjunctions[] = {"and", "but", "so", "and then", "yet"};
const char* const kNumberWords[] = {"two",   "three", "four", "five",   "six",
                                    "seven", "eight", "ten",  "twelve", "twenty"};
const char* const kSpeechVerbs[] = {"said", "asked", "wrote", "whispered", "answered"};

// ---- random choices -------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t key) : key_(key) {}
  uint32_t Next() {
    if (used_ == 4) {
      block_ = PhiloxRaw(key_, counter_++);
      used_ = 0;
    }
    return block_.v[used_++];
  }
  // Uniform in [0, n).
  size_t Below(size_t n) { return static_cast<size_t>((static_cast<uint64_t>(Next()) * n) >> 32); }
  // Favours small indices (the min of two uniforms): a few common words, a
  // tail of rarer ones, as natural text has.
  size_t Skewed(size_t n) { return std::min(Below(n), Below(n)); }
  bool Percent(uint32_t p) { return Below(100) < p; }
  int Range(int lo, int hi) {
    return lo + static_cast<int>(Below(static_cast<size_t>(hi - lo + 1)));
  }
  template <typename T>
  const T& Pick(const List<T>& l) {
    return l.items[Skewed(l.size)];
  }
  template <typename T, size_t N>
  const T& Pick(const T (&arr)[N]) {
    return arr[Skewed(N)];
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  Philox4 block_{};
  int used_ = 4;
};

bool StartsWithVowel(absl::string_view w) {
  return !w.empty() && std::strchr("aeiou", w[0]) != nullptr;
}

// ---- the grammar -------------------------------------------------------------------

struct Phrase {
  std::string text;
  bool plural = false;
};

class ArticleWriter {
 public:
  ArticleWriter(uint64_t seed, uint64_t index)
      : rng_(MixKey(KeyFromName("gtp.data.corpus.article", seed), index)) {
    topic_ = &kTopics[rng_.Below(kNumTopics)];
    other_ = &kTopics[rng_.Below(kNumTopics)];
    hero_ = kNames[rng_.Below(sizeof(kNames) / sizeof(kNames[0]))];
    friend_ = kNames[rng_.Below(sizeof(kNames) / sizeof(kNames[0]))];
  }

  std::string Write() {
    std::string out = Title();
    out += "\n\n";
    int paragraphs = rng_.Range(2, 5);
    for (int p = 0; p < paragraphs; ++p) {
      int sentences = rng_.Range(3, 7);
      for (int s = 0; s < sentences; ++s) {
        if (s > 0) out += ' ';
        out += Sentence();
      }
      out += "\n\n";
    }
    return out;
  }

 private:
  // Mostly the article's topic, sometimes another, so topics share words.
  const Topic& T() { return rng_.Percent(85) ? *topic_ : *other_; }

  const char* Name() {
    uint32_t r = rng_.Below(100);
    if (r < 45) return hero_;
    if (r < 70) return friend_;
    return kNames[rng_.Below(sizeof(kNames) / sizeof(kNames[0]))];
  }

  // "the old lamp", "an idle gpu", "many dusty books", "Ada".
  Phrase NounPhrase(bool allow_name = true) {
    if (allow_name && rng_.Percent(15)) return {Name(), false};
    const Topic& t = T();
    const Noun& n = rng_.Pick(t.nouns);
    bool plural = rng_.Percent(35);
    std::string adj = rng_.Percent(40) ? std::string(rng_.Pick(t.adjectives)) + " " : "";
    std::string noun = adj + (plural ? n.pl : n.sg);
    std::string det;
    if (plural) {
      static const char* const kDet[] = {"the",   "some",    "many",  "these",
                                         "those", "all the", "a few", "our"};
      uint32_t r = rng_.Below(10);
      det = r < 2 ? kNumberWords[rng_.Below(10)] : rng_.Pick(kDet);
    } else {
      static const char* const kDet[] = {"the", "a",    "every", "this", "that",
                                         "one", "each", "my",    "our"};
      det = rng_.Pick(kDet);
      if (det == "a" && StartsWithVowel(noun)) det = "an";
    }
    return {det + " " + noun, plural};
  }

  Phrase Subject() {
    if (rng_.Percent(12)) {
      static const Phrase kPronouns[] = {
          {"she", false}, {"he", false}, {"they", true}, {"we", true}, {"it", false}};
      return kPronouns[rng_.Below(5)];
    }
    return NounPhrase();
  }

  static const char* Form(const Verb& v, bool plural, bool past) {
    return past ? v.past : plural ? v.base : v.s;
  }

  // Every random draw below is its own statement: the order in which C++
  // evaluates the operands of + or the arguments of a call is unspecified,
  // and the corpus must not depend on the compiler.

  std::string Extra() {
    uint32_t r = rng_.Below(100);
    if (r < 30) {
      std::string prep = rng_.Pick(kPrepositions);
      std::string np = NounPhrase().text;
      return " " + prep + " " + np;
    }
    if (r < 45) return std::string(" ") + rng_.Pick(kAdverbs);
    if (r < 60) return std::string(" ") + rng_.Pick(kTimes);
    if (r < 66) return std::string(" in ") + T().place;
    return "";
  }

  // A clause without final punctuation: "the busy ranks gathered a shard near the queue".
  std::string Clause(bool past) {
    Phrase subj = Subject();
    std::string s = subj.text + " ";
    if (rng_.Percent(70)) {
      s += Form(rng_.Pick(T().verbs), subj.plural, past);
      s += " ";
      s += NounPhrase().text;
    } else {
      s += Form(rng_.Pick(kIntransitive), subj.plural, past);
    }
    s += Extra();
    return s;
  }

  std::string Sentence() {
    const bool past = rng_.Percent(40);
    std::string s;
    char end = '.';
    switch (rng_.Below(10)) {
      case 0:
      case 1:
      case 2:
        s = Clause(past);
        break;
      case 3: {
        s = rng_.Pick(kSubordinators);
        s += " ";
        s += Clause(past);
        s += ", ";
        s += Clause(past);
        break;
      }
      case 4: {
        s = Clause(past);
        s += ", ";
        s += rng_.Pick(kConjunctions);
        s += " ";
        s += Clause(past);
        break;
      }
      case 5: {
        s = Name();
        s += " ";
        s += rng_.Pick(kSpeechVerbs);
        s += " that ";
        s += Clause(past);
        break;
      }
      case 6: {
        std::string quote = Clause(false);
        quote[0] = absl::ascii_toupper(quote[0]);
        std::string verb = rng_.Pick(kSpeechVerbs);
        std::string who = Name();
        s = "\"" + quote + ",\" " + verb + " " + who;
        break;
      }
      case 7: {
        Phrase subj = NounPhrase();
        const Verb& v = rng_.Pick(T().verbs);
        std::string object = NounPhrase().text;
        const char* aux = past ? "did" : subj.plural ? "do" : "does";
        if (rng_.Percent(50)) {
          s = absl::StrCat(aux, " ", subj.text, " ", v.base, " ", object);
        } else {
          static const char* const kWh[] = {"Why", "How", "When", "Where"};
          std::string wh = rng_.Pick(kWh);
          s = absl::StrCat(wh, " ", aux, " ", subj.text, " ", v.base, " ", object);
        }
        end = '?';
        break;
      }
      case 8: {
        const Topic& t = T();
        const int n = rng_.Range(2, 99);
        if (rng_.Percent(50)) {
          std::string adj = rng_.Pick(t.adjectives);
          std::string noun = rng_.Pick(t.nouns).pl;
          s = absl::StrCat("There ", past ? "were " : "are ", n, " ", adj, " ", noun, " in ",
                           t.place);
        } else {
          std::string who = Name();
          std::string verb = rng_.Pick(t.verbs).past;
          const int count = rng_.Range(2, 12);
          std::string noun = rng_.Pick(t.nouns).pl;
          s = absl::StrCat("On day ", n, ", ", who, " ", verb, " ", count, " ", noun);
        }
        break;
      }
      default: {
        Phrase subj = Subject();
        s = subj.text + " " + Form(rng_.Pick(T().verbs), subj.plural, past) + " ";
        s += NounPhrase(false).text;
        s += ", ";
        s += NounPhrase(false).text;
        s += ", and ";
        s += NounPhrase(false).text;
        break;
      }
    }
    s[0] = absl::ascii_toupper(s[0]);
    s += end;
    return s;
  }

  std::string Title() {
    const Topic& t = *topic_;
    switch (rng_.Below(5)) {
      case 0: {
        std::string adj = rng_.Pick(t.adjectives);
        std::string noun = rng_.Pick(t.nouns).sg;
        return absl::StrCat("On the ", adj, " ", noun);
      }
      case 1:
        return absl::StrCat(hero_, " and the ", rng_.Pick(t.nouns).pl);
      case 2:
        return absl::StrCat("Notes on ", rng_.Pick(t.nouns).pl, " in ", t.place);
      case 3:
        return absl::StrCat("A ", rng_.Pick(t.adjectives), " day in ", t.place);
      default:
        return absl::StrCat("What ", hero_, " ", rng_.Pick(t.verbs).past);
    }
  }

  Rng rng_;
  const Topic* topic_;
  const Topic* other_;
  const char* hero_;
  const char* friend_;
};

// ---- the corpus --------------------------------------------------------------------

struct Corpus {
  std::shared_ptr<const std::string> bytes;
  std::vector<size_t> offsets;
  size_t num_handwritten = 0;
  std::shared_ptr<const ByteTokenSource> source;
};

const Corpus& GetCorpus() {
  static const Corpus* corpus = [] {
    auto* c = new Corpus();
    auto text = std::make_shared<std::string>();
    text->reserve(kEmbeddedCorpusBytes);
    c->offsets.push_back(0);
    auto add = [&](absl::string_view doc) {
      size_t room = kEmbeddedCorpusBytes - text->size();
      text->append(doc.data(), std::min(room, doc.size()));
      c->offsets.push_back(text->size());
    };
    for (size_t i = 0; i < data_internal::kNumHandwrittenDocuments; ++i) {
      add(data_internal::kHandwrittenDocuments[i]);
    }
    c->num_handwritten = data_internal::kNumHandwrittenDocuments;
    for (uint64_t i = 0; text->size() < kEmbeddedCorpusBytes; ++i) {
      add(GenerateArticle(kEmbeddedCorpusSeed, i));  // the last one is cut to fit
    }
    c->bytes = std::move(text);
    c->source = std::make_shared<ByteTokenSource>(c->bytes, c->offsets);
    return c;
  }();
  return *corpus;
}

}  // namespace

std::string GenerateArticle(uint64_t seed, uint64_t index) {
  return ArticleWriter(seed, index).Write();
}

absl::string_view EmbeddedCorpus() { return *GetCorpus().bytes; }

const std::vector<size_t>& EmbeddedCorpusDocumentOffsets() { return GetCorpus().offsets; }

size_t EmbeddedCorpusNumHandwrittenDocuments() { return GetCorpus().num_handwritten; }

absl::StatusOr<CorpusSplit> ParseCorpusSplit(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "all") return CorpusSplit::kAll;
  if (n == "train") return CorpusSplit::kTrain;
  if (n == "validation" || n == "valid" || n == "val") return CorpusSplit::kValidation;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown corpus split \"", name, "\" (expected all, train or validation)"));
}

DocumentRange EmbeddedCorpusSplit(CorpusSplit split) {
  const size_t n = GetCorpus().offsets.size() - 1;
  if (split == CorpusSplit::kAll) return {0, n};
  auto ranges = SplitDocuments(
      n, {1.0 - kEmbeddedCorpusValidationFraction, kEmbeddedCorpusValidationFraction});
  GTP_CHECK(ranges.ok(), ranges.status().ToString());
  return split == CorpusSplit::kTrain ? (*ranges)[0] : (*ranges)[1];
}

std::shared_ptr<const ByteTokenSource> EmbeddedCorpusSource() { return GetCorpus().source; }

}  // namespace gtp::data
