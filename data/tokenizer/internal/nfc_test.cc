#include "data/tokenizer/internal/nfc.h"

#include <string>

#include "data/tokenizer/internal/unicode.h"
#include "gtest/gtest.h"

namespace gtp::data::tokenizer_internal {
namespace {

std::string U(std::initializer_list<uint32_t> cps) {
  std::string s;
  for (uint32_t cp : cps) AppendUtf8(cp, &s);
  return s;
}

// Expected forms from the Unicode data (UnicodeData.txt decompositions,
// combining classes and CompositionExclusions.txt).
TEST(Nfc, ComposesPrimaryComposites) {
  EXPECT_EQ(Nfc("cafe\xCC\x81"), "caf\xC3\xA9");             // e + U+0301 -> U+00E9
  EXPECT_EQ(Nfc("caf\xC3\xA9"), "caf\xC3\xA9");              // already NFC
  EXPECT_EQ(Nfc(U({'A', 0x30A})), U({0xC5}));                // A + ring -> Å
  EXPECT_EQ(Nfc(U({'a', 0x301, 0x301})), U({0xE1, 0x301}));  // the second acute stays
}

TEST(Nfc, OrdersMarksByCombiningClassFirst) {
  // a + circumflex (230) + dot below (220): reordered to dot below first,
  // then a+0323 -> U+1EA1 and U+1EA1+0302 -> U+1EAD (ậ).
  EXPECT_EQ(Nfc(U({'a', 0x302, 0x323})), U({0x1EAD}));
  EXPECT_EQ(Nfc(U({'a', 0x323, 0x302})), U({0x1EAD}));
  // q has no composite: the marks are only reordered.
  EXPECT_EQ(Nfc(U({'q', 0x302, 0x323})), U({'q', 0x323, 0x302}));
}

TEST(Nfc, SingletonsExclusionsAndNonStarters) {
  EXPECT_EQ(Nfc(U({0x2126})), U({0x3A9}));                 // OHM SIGN -> GREEK CAPITAL OMEGA
  EXPECT_EQ(Nfc(U({0x212B})), U({0xC5}));                  // ANGSTROM SIGN -> Å
  EXPECT_EQ(Nfc(U({0xF900})), U({0x8C48}));                // CJK compatibility ideograph
  EXPECT_EQ(Nfc(U({0x958})), U({0x915, 0x93C}));           // excluded: stays decomposed
  EXPECT_EQ(Nfc(U({0x344})), U({0x308, 0x301}));           // non-starter decomposition
  EXPECT_EQ(Nfc(U({0x1E9B, 0x323})), U({0x1E9B, 0x323}));  // ẛ̣ (UAX #15's example)
}

TEST(Nfc, HangulAlgorithmically) {
  EXPECT_EQ(Nfc(U({0x1100, 0x1161})), U({0xAC00}));          // ᄀ + ᅡ -> 가
  EXPECT_EQ(Nfc(U({0x1100, 0x1161, 0x11A8})), U({0xAC01}));  // + ᆨ -> 각
  EXPECT_EQ(Nfc(U({0xAC00, 0x11A8})), U({0xAC01}));
  EXPECT_EQ(Nfc(U({0xAC01})), U({0xAC01}));
}

TEST(Nfc, BytesThatAreNotUtf8PassThrough) {
  EXPECT_EQ(Nfc("a\xFF"
                "e\xCC\x81"),
            "a\xFF\xC3\xA9");
  EXPECT_EQ(Nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");  // the byte blocks composition
  EXPECT_EQ(Nfc(""), "");
  EXPECT_EQ(Nfc("plain ASCII\n"), "plain ASCII\n");
}

TEST(Nfc, IsIdempotentOnEveryCodePoint) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string once = Nfc(U({cp}));
    ASSERT_EQ(Nfc(once), once) << std::hex << cp;
    // And with a following acute, which composes or is ordered after it.
    const std::string with_mark = Nfc(U({cp, 0x301}));
    ASSERT_EQ(Nfc(with_mark), with_mark) << std::hex << cp;
  }
}

}  // namespace
}  // namespace gtp::data::tokenizer_internal
