// SentencePieceTokenizer on models written byte by byte here (a tiny
// ModelProto writer: every expected id is derived by hand in the comments),
// every refusal, and the fixtures of tools/hf/spm_fixture.py in
// testdata/spm/ (models trained by the `sentencepiece` library, with its ids,
// pieces and decodes), skipped while those are absent.
#include "data/tokenizer/sentencepiece_tokenizer.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/tokenizer/internal/json.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

// ---- a ModelProto writer (protobuf wire format) ----------------------------------

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}
std::string Tag(int field, int wire) { return Varint((static_cast<uint64_t>(field) << 3) | wire); }
std::string Len(int field, const std::string& bytes) {
  return Tag(field, 2) + Varint(bytes.size()) + bytes;
}
std::string Int(int field, int64_t v) { return Tag(field, 0) + Varint(static_cast<uint64_t>(v)); }
std::string Float(int field, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  std::string s = Tag(field, 5);
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(u >> (8 * i)));
  return s;
}

enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
struct P {
  std::string piece;
  float score = 0;
  int type = kNormal;
};

struct Spec {
  int model_type = 2;  // BPE
  bool byte_fallback = false;
  std::optional<int64_t> unk_id, bos_id, eos_id, pad_id;
  bool add_dummy_prefix = true, remove_extra_whitespaces = false, escape_whitespaces = true;
  std::string charsmap;
  std::string trainer_extra, normalizer_extra, top_extra;  // raw fields appended
};

std::string Model(const std::vector<P>& pieces, const Spec& s = {}) {
  std::string out;
  for (const P& p : pieces) out += Len(1, Len(1, p.piece) + Float(2, p.score) + Int(3, p.type));
  std::string ts = Int(3, s.model_type) + Int(4, static_cast<int64_t>(pieces.size())) +
                   Int(35, s.byte_fallback);
  if (s.unk_id) ts += Int(40, *s.unk_id);
  if (s.bos_id) ts += Int(41, *s.bos_id);
  if (s.eos_id) ts += Int(42, *s.eos_id);
  if (s.pad_id) ts += Int(43, *s.pad_id);
  out += Len(2, ts + s.trainer_extra);
  std::string ns = Len(1, s.charsmap.empty() ? "identity" : "nmt_nfkc");
  if (!s.charsmap.empty()) ns += Len(2, s.charsmap);
  ns += Int(3, s.add_dummy_prefix) + Int(4, s.remove_extra_whitespaces) + Int(5, s.escape_whitespaces);
  return out + Len(3, ns + s.normalizer_extra) + s.top_extra;
}

const std::string kSp = "\xE2\x96\x81";  // "▁"
std::string Sp(const std::string& rest) { return kSp + rest; }

std::vector<P> Specials() { return {{"<unk>", 0, kUnknown}, {"<s>", 0, kControl}, {"</s>", 0, kControl}}; }
std::vector<P> WithBytes(std::vector<P> v) {
  for (int b = 0; b < 256; ++b) v.push_back({absl::StrFormat("<0x%02X>", b), 0, kByte});
  return v;
}
std::vector<P> Plus(std::vector<P> v, const std::vector<P>& more) {
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

SentencePieceTokenizer Must(const std::string& bytes) {
  absl::StatusOr<SentencePieceTokenizer> t = SentencePieceTokenizer::FromString(bytes);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::string Refusal(const std::string& bytes) {
  absl::StatusOr<SentencePieceTokenizer> t = SentencePieceTokenizer::FromString(bytes);
  if (t.ok()) return "(loaded)";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  return std::string(t.status().message());
}

// ---- model A: Llama-2 style BPE (byte fallback, dummy prefix, spaces kept) -------
// Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF> (byte b is 3 + b), then:
constexpr int32_t kT = 259, kHe = 260, kThe = 261, kA = 262, kBc = 263, kAb = 264, kXx = 265,
                  kSpSp = 266, kSpace = 267, kCharT = 268, kCharA = 271, kCharB = 272, kCharC = 273,
                  kCharX = 274;
std::string ModelA(Spec spec = {}) {
  spec.byte_fallback = true;
  return Model(Plus(WithBytes(Specials()),
                    {{Sp("t"), -1}, {"he", -2}, {Sp("the"), -3}, {Sp("a"), -4}, {"bc", -4.5f},
                     {"ab", -5}, {"xx", -7}, {Sp(kSp), -8}, {kSp, -10}, {"t", -10}, {"h", -10},
                     {"e", -10}, {"a", -10}, {"b", -10}, {"c", -10}, {"x", -10}}),
               spec);
}
int32_t Byte(int b) { return 3 + b; }

TEST(SentencePieceTokenizer, BpeMergesTheHighestScoringPairFirst) {
  const SentencePieceTokenizer tok = Must(ModelA());
  EXPECT_EQ(tok.vocab_size(), 275);
  EXPECT_EQ(tok.model_type(), SentencePieceTokenizer::ModelType::kBpe);
  // "the" → "▁the" = ▁ t h e. Pairs ▁t (-1), he (-2); "th" is no piece.
  // ▁t first → [▁t h e]; then he → [▁t he]; then ▁t+he = ▁the (-3).
  EXPECT_EQ(tok.Encode("the"), (Ids{kThe}));
  // "cabc" → ▁ c a b c: ab (-5) is left of bc (-4.5) but bc scores higher:
  // [▁ c a bc]; then a+bc = "abc" is no piece, and ab is stale.
  EXPECT_EQ(tok.Encode("cabc"), (Ids{kSpace, kCharC, kCharA, kBc}));
  // "xxx" → ▁ x x x: xx (-7) twice, a tie: the leftmost merges → [▁ xx x].
  EXPECT_EQ(tok.Encode("xxx"), (Ids{kSpace, kXx, kCharX}));
  // "a the" → ▁a ▁the: ▁t (-1), he (-2), ▁the (-3), then ▁a (-4).
  EXPECT_EQ(tok.Encode("a the"), (Ids{kA, kThe}));
  // Spaces kept: "a  b" → ▁ a ▁ ▁ b: ▁a (-4), then ▁▁ (-8) → [▁a ▁▁ b].
  EXPECT_EQ(tok.Encode("a  b"), (Ids{kA, kSpSp, kCharB}));
  // A leading space: "▁▁the": ▁t (-1) at 1 → [▁ ▁t h e] → [▁ ▁t he] → [▁ ▁the];
  // the pair ▁▁ (-8) went stale when its right side grew.
  EXPECT_EQ(tok.Encode(" the"), (Ids{kSpace, kThe}));
  EXPECT_EQ(tok.Encode(""), Ids{});
  EXPECT_EQ(tok.EncodeAsPieces("a the"), (Pieces{Sp("a"), Sp("the")}));
}

TEST(SentencePieceTokenizer, BpeFallsBackToBytes) {
  const SentencePieceTokenizer tok = Must(ModelA());
  // "é" (C3 A9) and '\t' are no pieces: one <0xNN> per UTF-8 byte.
  EXPECT_EQ(tok.Encode("\xC3\xA9"), (Ids{kSpace, Byte(0xC3), Byte(0xA9)}));
  EXPECT_EQ(tok.Encode("t\tt"), (Ids{kT, Byte('\t'), kCharT}));
  EXPECT_EQ(tok.EncodeAsPieces("\xC3\xA9"), (Pieces{kSp, "<0xC3>", "<0xA9>"}));
  // Typed control and byte pieces are text: "<s>" is < s >, each a byte.
  EXPECT_EQ(tok.Encode("<s>"), (Ids{kSpace, Byte('<'), Byte('s'), Byte('>')}));
  // An invalid byte reads as U+FFFD (EF BF BD), which then falls back to bytes.
  EXPECT_EQ(tok.Encode("\xFF"), (Ids{kSpace, Byte(0xEF), Byte(0xBF), Byte(0xBD)}));
}

TEST(SentencePieceTokenizer, DecodeDropsTheDummyPrefixAndAssemblesBytes) {
  const SentencePieceTokenizer tok = Must(ModelA());
  // Control pieces give nothing; the first piece's "▁" is the dummy prefix.
  EXPECT_EQ(*tok.Decode({1, kThe, 2}), "the");
  EXPECT_EQ(*tok.Decode({kThe, kThe}), "the the");
  // Only the first piece loses its "▁": "▁" alone, then "▁the" keeps its space.
  EXPECT_EQ(*tok.Decode({1, kSpace, kThe}), " the");
  // A byte first is text already: the "▁t" after it keeps its space.
  EXPECT_EQ(*tok.Decode({Byte(' '), kT}), "  t");
  // Byte runs are UTF-8: 你 = E4 BD A0; a cut character is U+FFFD per byte.
  EXPECT_EQ(*tok.Decode({Byte(0xE4), Byte(0xBD), Byte(0xA0)}), "\xE4\xBD\xA0");
  EXPECT_EQ(*tok.Decode({Byte(0xE4), Byte(0xBD), kThe}), "\xEF\xBF\xBD\xEF\xBF\xBD the");
  // <unk> reads as trainer_spec.unk_surface, " ⁇ " by default.
  EXPECT_EQ(*tok.Decode({kA, 0}), "a \xE2\x81\x87 ");
  // Round trips where nothing is lost.
  for (const std::string s : {"the", " the", "a  b", "cabc xxx", "\xC3\xA9t\tt\n", "  "}) {
    EXPECT_EQ(*tok.Decode(tok.Encode(s)), s) << s;
  }
  absl::StatusOr<std::string> bad = tok.Decode({kA, 275});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "token id 275 is not in the vocabulary (size 275)");
  EXPECT_FALSE(tok.Decode({-1}).ok());
}

TEST(SentencePieceTokenizer, SpecialIdsAndLookups) {
  const SentencePieceTokenizer tok = Must(ModelA());
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), std::nullopt);
  EXPECT_EQ(tok.SpecialTokenId("</s>"), 2);
  EXPECT_EQ(tok.SpecialTokenId(Sp("the")), std::nullopt);  // a NORMAL piece
  EXPECT_EQ(tok.TokenId(Sp("the")), kThe);
  EXPECT_EQ(tok.TokenId("<0x0A>"), Byte('\n'));
  EXPECT_EQ(tok.TokenId("nope"), std::nullopt);
  EXPECT_EQ(tok.IdToPiece(kHe), "he");
  EXPECT_EQ(tok.IdToPiece(9999), "");
  EXPECT_NE(tok.Summary().find("SentencePiece BPE, 275 pieces (2 control, 256 byte"), std::string::npos)
      << tok.Summary();
  // A custom unk_surface (trainer_spec field 44).
  Spec s;
  s.trainer_extra = Len(44, "<?>");
  EXPECT_EQ(*Must(ModelA(s)).Decode({0}), "<?>");
}

// ---- model B: no byte fallback, extra whitespace removed, a user-defined piece ----
// 0 <unk>, 1 <s>, 2 </s>, 3 <mask> (USER_DEFINED), 4 ▁h (-1), 5 i (-2), 6 h (-3), 7 ▁ (-4).
std::string ModelB() {
  Spec s;
  s.remove_extra_whitespaces = true;
  return Model(Plus(Specials(), {{"<mask>", 0, kUserDefined}, {Sp("h"), -1}, {"i", -2}, {"h", -3},
                                 {kSp, -4}}),
               s);
}

TEST(SentencePieceTokenizer, UnknownRunsAreOneUnkWithoutByteFallback) {
  const SentencePieceTokenizer tok = Must(ModelB());
  // "  hi  there " normalizes to "▁hi▁there" (leading, repeated and trailing
  // spaces dropped). ▁h (-1) merges; t is unknown, h known, "ere" one run.
  EXPECT_EQ(tok.Encode("  hi  there "), (Ids{4, 5, 7, 0, 6, 0}));
  EXPECT_EQ(tok.EncodeAsPieces("  hi  there "), (Pieces{Sp("h"), "i", kSp, "t", "h", "ere"}));
  // The user-defined piece is whole and never merged; it splits the unknown run.
  EXPECT_EQ(tok.Encode("a<mask>b"), (Ids{7, 0, 3, 0}));
  EXPECT_EQ(tok.SpecialTokenId("<mask>"), 3);
  EXPECT_EQ(tok.Encode("   "), Ids{});  // all whitespace: nothing, no dummy prefix
  // Decode: with extra whitespace removed, every leading "▁" goes.
  EXPECT_EQ(*tok.Decode({7, 7, 4, 5}), "hi");
  EXPECT_EQ(*tok.Decode({4, 5, 7, 0}), "hi  \xE2\x81\x87 ");
}

// ---- model C: Unigram ---------------------------------------------------------
// 0 <unk>, 1 <s>, 2 </s>, 3 ▁ (-2), 4 a (-3), 5 b (-3), 6 ab (-4), 7 ▁a (-5),
// 8 ▁ab (-10), 9 c (-3). The lowest score is -10, so an unknown character costs -20.
std::string ModelC() {
  Spec s;
  s.model_type = 1;
  return Model(Plus(Specials(), {{kSp, -2}, {"a", -3}, {"b", -3}, {"ab", -4}, {Sp("a"), -5},
                                 {Sp("ab"), -10}, {"c", -3}}),
               s);
}

TEST(SentencePieceTokenizer, UnigramTakesTheBestPath) {
  const SentencePieceTokenizer tok = Must(ModelC());
  EXPECT_EQ(tok.model_type(), SentencePieceTokenizer::ModelType::kUnigram);
  // "▁ab": ▁|ab = -6 beats ▁a|b = -8, ▁|a|b = -8 and ▁ab = -10.
  EXPECT_EQ(tok.Encode("ab"), (Ids{3, 6}));
  // "▁abc": ▁|ab|c = -9.
  EXPECT_EQ(tok.Encode("abc"), (Ids{3, 6, 9}));
  // "▁a": ▁a = -5 and ▁|a = -5 tie; the path found first (the piece starting
  // earlier) stays.
  EXPECT_EQ(tok.Encode("a"), (Ids{7}));
  // "▁xy": x and y are unknown (-20 each), one <unk> for the run.
  EXPECT_EQ(tok.Encode("xy"), (Ids{3, 0}));
  EXPECT_EQ(tok.EncodeAsPieces("xy"), (Pieces{kSp, "xy"}));
  EXPECT_EQ(*tok.Decode({3, 6, 9}), "abc");
}

// ---- model D: an UNUSED piece is merged through, then split back -------------
// 0 <unk>, 1 <s>, 2 </s>, 3 ab (UNUSED, -1), 4 abc (-2), 5 ▁ (-5), 6 a, 7 b, 8 c (-5), 9 bc (-3).
TEST(SentencePieceTokenizer, UnusedPiecesAreSplitBack) {
  const SentencePieceTokenizer tok = Must(Model(Plus(
      Specials(), {{"ab", -1, kUnused}, {"abc", -2}, {kSp, -5}, {"a", -5}, {"b", -5}, {"c", -5},
                   {"bc", -3}})));
  // "▁ab": ab (-1) merges, but it is UNUSED: resegmented into a, b.
  EXPECT_EQ(tok.Encode("ab"), (Ids{5, 6, 7}));
  // "▁abc": ab (-1) first, then ab+c = abc (-2) beats the stale bc.
  EXPECT_EQ(tok.Encode("abc"), (Ids{5, 4}));
}

TEST(SentencePieceTokenizer, NormalizerOptions) {
  Spec s;
  s.add_dummy_prefix = false;
  const SentencePieceTokenizer no_prefix = Must(ModelA(s));
  // No dummy prefix: "the" is t h e → he → [t he]; "▁the" needs the space.
  EXPECT_EQ(no_prefix.Encode("the"), (Ids{kCharT, kHe}));
  EXPECT_EQ(no_prefix.Encode(" the"), (Ids{kThe}));
  EXPECT_EQ(*no_prefix.Decode({kThe}), " the");  // nothing to strip
  Spec e;
  e.escape_whitespaces = false;
  const SentencePieceTokenizer no_escape = Must(ModelA(e));
  // Spaces stay ' ' (a byte here), the dummy prefix too.
  EXPECT_EQ(no_escape.Encode("a"), (Ids{Byte(' '), kCharA}));
}

// Fields this reader does not know are skipped; a message given twice merges.
TEST(SentencePieceTokenizer, ToleratesAddedFields) {
  Spec s;
  s.trainer_extra = Int(99, 7) + Len(200, "extension") + Float(10, 0.99f) + Tag(11, 1) + std::string(8, 'x');
  s.normalizer_extra = Len(6, "rules.tsv");
  s.top_extra = Len(2, Int(42, 5)) + Len(77, "later field");  // a second trainer_spec: eos_id 5
  const SentencePieceTokenizer tok = Must(ModelA(s));
  EXPECT_EQ(tok.Encode("the"), (Ids{kThe}));
  EXPECT_EQ(tok.eos_id(), 2);  // by name ("</s>"), as sentencepiece's eos_id()
}

TEST(SentencePieceTokenizer, SelfTestSamplesMustPass) {
  Spec ok;
  ok.top_extra = Len(4, Len(1, Len(1, "the") + Len(2, Sp("the"))));
  EXPECT_EQ(Must(ModelA(ok)).Encode("the"), (Ids{kThe}));
  Spec bad;
  bad.top_extra = Len(4, Len(1, Len(1, "the") + Len(2, Sp("t") + " he")));
  EXPECT_NE(Refusal(ModelA(bad)).find("self_test_data sample 0 (\"the\") encodes as \"\xE2\x96\x81the\" "
                                      "but the file expects"),
            std::string::npos)
      << Refusal(ModelA(bad));
}

TEST(SentencePieceTokenizer, LoadNamesTheFile) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/tiny.model";
  {
    std::ofstream f(path, std::ios::binary);
    f << ModelA();
  }
  absl::StatusOr<SentencePieceTokenizer> t = SentencePieceTokenizer::Load(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->Encode("the"), (Ids{kThe}));
  absl::StatusOr<SentencePieceTokenizer> missing = SentencePieceTokenizer::Load(dir + "/nope.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.model"), absl::string_view::npos);
  {
    std::ofstream f(path, std::ios::binary);
    f << ModelA().substr(0, 100);
  }
  absl::StatusOr<SentencePieceTokenizer> cut = SentencePieceTokenizer::Load(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(path + ": truncated file"), absl::string_view::npos)
      << cut.status();
}

// ---- refusals -------------------------------------------------------------------

struct Refused {
  const char* what;
  std::string bytes;
  std::string message;  // a substring of the error
};

TEST(SentencePieceTokenizer, RefusesWhatItDoesNotImplementOrCannotRead) {
  const std::vector<P> base = Specials();
  auto with = [&](const std::vector<P>& more, Spec s = {}) { return Model(Plus(base, more), s); };
  auto type = [](int t) {
    Spec s;
    s.model_type = t;
    return s;
  };
  Spec fallback;
  fallback.byte_fallback = true;
  Spec suffix;
  suffix.trainer_extra = Int(24, 1);
  Spec denorm;
  denorm.top_extra = Len(5, Len(1, "x") + Len(2, std::string(8, '\1')));
  auto ids = [](std::optional<int64_t> unk, std::optional<int64_t> bos, std::optional<int64_t> pad) {
    Spec s;
    s.unk_id = unk;
    s.bos_id = bos;
    s.pad_id = pad;
    return s;
  };
  Spec charsmap_short;
  charsmap_short.charsmap = std::string("\x08\x00\x00\x00\x01", 5);
  Spec charsmap_value;  // one unit: a value pointing past the 2 bytes of replacements
  charsmap_value.charsmap = std::string("\x04\x00\x00\x00\x10\x00\x00\x80", 8) + std::string("a\0", 2);
  std::string all_bytes_but_one = Model(WithBytes(base), fallback);
  const std::string one = Len(1, Len(1, "<0x41>") + Float(2, 0) + Int(3, kByte));
  all_bytes_but_one.erase(all_bytes_but_one.find(one), one.size());
  const std::string model_a = ModelA();
  const std::vector<Refused> cases = {
      {"empty", "", "the file is empty"},
      {"json", "{\"model\": {}}", "this is JSON, not a SentencePiece model"},
      {"truncated", model_a.substr(0, model_a.size() / 2), "truncated file: ModelProto"},
      {"truncated varint", "\x0A\x85", "truncated file: ModelProto ends inside pieces at byte 1"},
      {"wrong wire type", Int(1, 5), "ModelProto field 1 (pieces) has wire type 0 (varint)"},
      {"group", Tag(1, 3), "with field number 1 and wire type 3 (start-group)"},
      {"field zero", Tag(0, 0), "with field number 0"},
      {"piece field wire type", Len(1, Int(1, 3)), "ModelProto.pieces[0] field 1 (piece) has wire type 0"},
      {"score wire type", Len(1, Len(1, "a") + Int(2, 1)), "field 2 (score) has wire type 0 (varint)"},
      {"no pieces", Len(2, Int(3, 2)), "ModelProto has no pieces (field 1)"},
      {"no trainer_spec", Len(1, Len(1, "<unk>") + Int(3, kUnknown)),
       "ModelProto has 1 pieces but no trainer_spec (field 2), which every trained model has: the "
       "file was cut short"},
      {"WORD", with({}, type(3)), "trainer_spec.model_type is WORD: only BPE"},
      {"CHAR", with({}, type(4)), "trainer_spec.model_type is CHAR: only BPE"},
      {"unknown type", with({}, type(9)), "trainer_spec.model_type is 9, not a SentencePiece model type"},
      {"empty piece", with({{"", 0}}), "piece 3 is empty"},
      {"NUL piece", with({{std::string("a\0b", 3), 0}}), "piece 3 (\"a\\x00\\x62\") holds a NUL byte"},
      {"long piece", with({{std::string(8000, 'a'), 0}}), "piece 3 is 8000 bytes long"},
      {"piece type", with({{"a", 0, 9}}), "piece 3 (\"a\") has type 9, not one of NORMAL=1"},
      {"duplicate", with({{"a", 0}, {"a", -1}}), "piece 4 (\"a\") appears twice: ids 3 and 4"},
      {"duplicate across kinds", with({{"<s>", 0}}), "piece 3 (\"<s>\") appears twice: ids 1 and 3"},
      {"NaN", with({{"a", std::nanf("")}}), "piece 3 (\"a\") has a NaN score"},
      {"no unk", Model({{"a", 0}}), "no piece has type UNKNOWN"},
      {"two unk", with({{"<unk2>", 0, kUnknown}}), "two UNKNOWN pieces: ids 0 and 3"},
      {"byte without fallback", with({{"<0x41>", 0, kByte}}),
       "piece 3 (\"<0x41>\") is a BYTE piece but trainer_spec.byte_fallback is false"},
      {"bad byte piece", with({{"<0x4a>", 0, kByte}}, fallback), "is a BYTE piece but not spelled <0xNN>"},
      {"missing byte", all_bytes_but_one, "byte_fallback is true but there is no BYTE piece <0x41>"},
      {"unk_id out of range", with({}, ids(7, {}, {})), "trainer_spec.unk_id is 7, outside the 3 pieces"},
      {"bos_id out of range", with({}, ids({}, -2, {})), "trainer_spec.bos_id is -2, outside the 3 pieces"},
      {"pad_id out of range", with({}, ids({}, {}, 3)), "trainer_spec.pad_id is 3, outside the 3 pieces"},
      {"unk_id elsewhere", with({}, ids(1, {}, {})), "trainer_spec.unk_id is 1 but the UNKNOWN piece is id 0"},
      {"suffix", with({}, suffix), "trainer_spec.treat_whitespace_as_suffix is true"},
      {"denormalizer", with({}, denorm), "denormalizer_spec has decoding rules (8 bytes"},
      {"charsmap short", with({}, charsmap_short), "precompiled_charsmap is malformed: its trie claims 8 bytes of 1"},
      {"charsmap value", with({}, charsmap_value), "precompiled_charsmap is malformed: trie unit 0 points at byte 16"},
  };
  for (const Refused& c : cases) {
    const std::string got = Refusal(c.bytes);
    EXPECT_NE(got.find(c.message), std::string::npos) << c.what << ": " << got;
  }
}

// ---- fixtures from the sentencepiece library (tools/hf/spm_fixture.py) ---------

constexpr char kFixtureDir[] = "data/tokenizer/testdata/spm/";

std::optional<std::string> ReadFixture(const std::string& name) {
  std::ifstream f(kFixtureDir + name, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Ids IdsOf(const tokenizer_internal::JsonValue& v) {
  Ids out;
  for (const auto& x : v.items) out.push_back(static_cast<int32_t>(x.integer));
  return out;
}

TEST(SentencePieceTokenizer, MatchesTheSentencePieceLibrary) {
  const std::optional<std::string> json = ReadFixture("expected.json");
  if (!json) {
    GTEST_SKIP() << "no " << kFixtureDir << "expected.json yet: run `python3 tools/hf/spm_fixture.py "
                 << "OUTDIR` where the sentencepiece package is installed (the GPU machine) and copy "
                 << "OUTDIR/* into " << kFixtureDir;
  }
  absl::StatusOr<tokenizer_internal::JsonValue> root = tokenizer_internal::ParseJson(*json);
  ASSERT_TRUE(root.ok()) << root.status();
  const tokenizer_internal::JsonValue* models = root->Find("models");
  ASSERT_NE(models, nullptr);
  int checked = 0;
  for (size_t m = 0; m < models->keys.size(); ++m) {
    const std::string& name = models->keys[m];
    const tokenizer_internal::JsonValue& e = models->items[m];
    SCOPED_TRACE(name);
    const std::optional<std::string> bytes = ReadFixture(e.Find("file")->string);
    ASSERT_TRUE(bytes.has_value()) << e.Find("file")->string;
    absl::StatusOr<SentencePieceTokenizer> tok = SentencePieceTokenizer::FromString(*bytes);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->vocab_size(), e.Find("vocab_size")->integer);
    EXPECT_EQ(tok->unk_id(), e.Find("unk_id")->integer);
    auto id_or = [](std::optional<int32_t> id) { return id ? *id : -1; };
    EXPECT_EQ(id_or(tok->bos_id()), e.Find("bos_id")->integer);
    EXPECT_EQ(id_or(tok->eos_id()), e.Find("eos_id")->integer);
    EXPECT_EQ(id_or(tok->pad_id()), e.Find("pad_id")->integer);
    int bad = 0;
    for (const auto& c : e.Find("cases")->items) {
      const std::string& text = c.Find("text")->string;
      const Ids want = IdsOf(*c.Find("ids"));
      const Ids got = tok->Encode(text);
      Pieces want_pieces;
      for (const auto& p : c.Find("pieces")->items) want_pieces.push_back(p.string);
      absl::StatusOr<std::string> decoded = tok->Decode(want);
      const bool ok = got == want && tok->EncodeAsPieces(text) == want_pieces && decoded.ok() &&
                      *decoded == c.Find("decoded")->string;
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << "\"" << absl::CHexEscape(text) << "\": ids "
                      << ::testing::PrintToString(got) << ", sentencepiece "
                      << ::testing::PrintToString(want) << "; decode \""
                      << absl::CHexEscape(decoded.ok() ? *decoded : "(error)") << "\", want \""
                      << absl::CHexEscape(c.Find("decoded")->string) << "\"";
      }
      ++checked;
    }
    EXPECT_EQ(bad, 0) << bad << " of " << e.Find("cases")->items.size() << " strings differ";
    for (const auto& d : e.Find("decode_cases")->items) {
      absl::StatusOr<std::string> got = tok->Decode(IdsOf(*d.Find("ids")));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, d.Find("text")->string) << ::testing::PrintToString(IdsOf(*d.Find("ids")));
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace gtp::data
