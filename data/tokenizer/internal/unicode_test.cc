// Tests of the tokenizer's internals: UTF-8 decoding, the class table, and
// the vocab.json reader.
#include "data/tokenizer/internal/unicode.h"

#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer/internal/json.h"
#include "gtest/gtest.h"

namespace gtp::data::tokenizer_internal {
namespace {

TEST(CharClassTable, IsSortedAndDisjoint) {
  absl::Span<const CharRange> t = CharClassTable();
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_LE(t[i].lo, t[i].hi) << i;
    if (i > 0) {
      EXPECT_LT(t[i - 1].hi, t[i].lo) << i;
    }
  }
}

TEST(ClassifyCodePoint, KnownCharacters) {
  struct Case {
    int32_t cp;
    CharClass cls;
  };
  const Case cases[] = {
      {'a', CharClass::kLetter},
      {'Z', CharClass::kLetter},
      {'5', CharClass::kNumber},
      {' ', CharClass::kSpace},
      {'\n', CharClass::kSpace},
      {'\'', CharClass::kOther},
      {'_', CharClass::kOther},
      {0x1C, CharClass::kOther},
      {0xE9, CharClass::kLetter},  // é
      {0xD7, CharClass::kOther},
      {0xF7, CharClass::kOther},
      {0xB2, CharClass::kNumber},  // ×÷²
      {0x0301, CharClass::kOther},
      {0x0416, CharClass::kLetter},  // combining acute, Ж
      {0x05D0, CharClass::kLetter},
      {0x0628, CharClass::kLetter},
      {0x0663, CharClass::kNumber},
      {0x0928, CharClass::kLetter},
      {0x094D, CharClass::kOther},
      {0x0966, CharClass::kNumber},
      {0x4E2D, CharClass::kLetter},
      {0x3042, CharClass::kLetter},
      {0x30A2, CharClass::kLetter},
      {0x30FB, CharClass::kOther},
      {0xAC00, CharClass::kLetter},
      {0xFF11, CharClass::kNumber},
      {0x3000, CharClass::kSpace},
      {0x00A0, CharClass::kSpace},
      {0x2028, CharClass::kSpace},
      {0x200B, CharClass::kOther},  // zero-width space is Cf, not White_Space
      {0x1F44B, CharClass::kOther},
      {0x20000, CharClass::kLetter},
      {-1, CharClass::kOther},
  };
  for (const Case& c : cases) EXPECT_EQ(ClassifyCodePoint(c.cp), c.cls) << std::hex << c.cp;
}

TEST(DecodeUtf8, ValidAndInvalid) {
  auto d = [](const std::string& s) { return DecodeUtf8(s, 0); };
  EXPECT_EQ(d("a").code_point, 'a');
  EXPECT_EQ(d("\xc3\xa9").code_point, 0xE9);
  EXPECT_EQ(d("\xc3\xa9").length, 2u);
  EXPECT_EQ(d("\xe4\xb8\xad").code_point, 0x4E2D);
  EXPECT_EQ(d("\xf0\x9f\x91\x8b").code_point, 0x1F44B);
  EXPECT_EQ(d("\xf0\x9f\x91\x8b").length, 4u);
  for (const std::string bad : {"\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
                                "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xe4\xb8",
                                "\xe4"
                                "a"}) {
    Utf8Char c = d(bad);
    EXPECT_EQ(c.code_point, -1) << bad;
    EXPECT_EQ(c.length, 1u) << bad;
  }
}

TEST(AppendUtf8, RoundTripsEveryScalarValue) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x800 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(cp, &s);
    Utf8Char c = DecodeUtf8(s, 0);
    ASSERT_EQ(c.code_point, static_cast<int32_t>(cp));
    ASSERT_EQ(c.length, s.size());
  }
}

TEST(ParseStringIntObject, EscapesAndSurrogates) {
  auto r = ParseStringIntObject(
      " {\"a\": 0, \"\\u0120the\":262 ,\"\\\"\\\\\\/\\b\\f\\n\\r\\t\": -3,"
      "\"\\ud83d\\udc4b\": 7, \"\xc3\xa9\": 2147483647, \"\": 1}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::pair<std::string, int32_t>> want = {{"a", 0},
                                                       {"\xc4\xa0the", 262},
                                                       {"\"\\/\b\f\n\r\t", -3},
                                                       {"\xf0\x9f\x91\x8b", 7},
                                                       {"\xc3\xa9", 2147483647},
                                                       {"", 1}};
  EXPECT_EQ(*r, want);
  auto empty = ParseStringIntObject("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ParseStringIntObject, RejectsMalformedInput) {
  for (const char* bad : {"",
                          "[]",
                          "{",
                          "{\"a\"}",
                          "{\"a\":}",
                          "{\"a\":1,}",
                          "{\"a\":1.5}",
                          "{\"a\":1e3}",
                          "{\"a\":01}",
                          "{\"a\":\"1\"}",
                          "{\"a\":1} x",
                          "{\"\\ud83d\":1}",
                          "{\"\\udc4b\":1}",
                          "{\"\\ud83d\\u0041\":1}",
                          "{\"\\x\":1}",
                          "{\"\\u12g4\":1}",
                          "{\"a\nb\":1}",
                          "{\"a\":2147483648}",
                          "{\"a\" 1}",
                          "{\"a\":1 \"b\":2}"}) {
    EXPECT_FALSE(ParseStringIntObject(bad).ok()) << bad;
  }
}

TEST(FindStringField, SkipsOtherValues) {
  auto r = FindStringField(
      R"({"id": 12, "meta": {"a": [1, -2.5e3, true, null, {"text": "no"}]}, "text": "h\u00e9\n"})",
      "text");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::optional<std::string>("h\xc3\xa9\n"));
  r = FindStringField(R"({"id": 1})", "text");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::nullopt);
  EXPECT_FALSE(FindStringField(R"({"text": 5})", "text").ok());
  EXPECT_FALSE(FindStringField(R"({"id": [1, }, "text": "a"})", "text").ok());
  EXPECT_FALSE(FindStringField(R"({"id": tru, "text": "a"})", "text").ok());
  EXPECT_FALSE(FindStringField(R"({"text": "a"} {})", "text").ok());
}

}  // namespace
}  // namespace gtp::data::tokenizer_internal
