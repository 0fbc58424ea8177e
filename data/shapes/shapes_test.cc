#include "data/shapes/shapes.h"

#include <cmath>
#include <map>
#include <set>

#include "gtest/gtest.h"

namespace gtp::data::shapes {
namespace {

ShapesTask Task() { return *ShapesTask::Create({}); }

TEST(Shapes, SamplesArePureFunctionsOfSplitAndIndex) {
  ShapesTask t = Task();
  const Sample a = t.Make(kTrain, 17), b = t.Make(kTrain, 17), c = t.Make(kValid, 17);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.caption, b.caption);
  EXPECT_NE(a.pixels, c.pixels);
  // A batch is the same samples however it is cut.
  const auto whole = t.MakeBatch(kTrain, 8, 4);
  const auto tail = t.MakeBatch(kTrain, 10, 2);
  const size_t pp = static_cast<size_t>(t.num_patches()) * t.patch_dim();
  EXPECT_TRUE(std::equal(tail.patches.begin(), tail.patches.end(), whole.patches.begin() + 2 * pp));
  EXPECT_EQ(tail.ids, (std::vector<int64_t>{10, 11}));
}

TEST(Shapes, CaptionsAreUniformAndIndependent) {
  ShapesTask t = Task();
  std::map<std::vector<int32_t>, int> seen;
  const int n = 9600;
  for (int i = 0; i < n; ++i) ++seen[t.Make(kTrain, i).caption];
  EXPECT_EQ(seen.size(), 48u);  // 2 sizes × 6 colours × 4 shapes
  for (const auto& [caption, count] : seen) {
    EXPECT_NEAR(count, n / 48.0, 4 * std::sqrt(n / 48.0)) << ShapesTask::Decode(caption.data(), 6);
  }
}

TEST(Shapes, PixelsShowTheCaptionedColourWhereTheShapeIs) {
  ShapesTask t = Task();
  const int S = t.config().image_size;
  for (int i = 0; i < 50; ++i) {
    const Sample s = t.Make(kTrain, i);
    ASSERT_EQ(s.pixels.size(), static_cast<size_t>(S * S * 3));
    // The box's centre pixel is inside every shape: its colour is the caption's.
    const int cx = s.x0 + (s.extent - 1) / 2, cy = s.y0 + (s.extent - 1) / 2;
    const float* px = &s.pixels[(cy * S + cx) * 3];
    const std::string word = ShapesTask::Vocab()[s.caption[3]];
    const bool red = px[0] > 0.5f, green = px[1] > 0.5f, blue = px[2] > 0.5f;
    const std::map<std::string, std::array<bool, 3>> want = {
        {"red", {true, false, false}},    {"green", {false, true, false}},
        {"blue", {false, false, true}},   {"yellow", {true, true, false}},
        {"magenta", {true, false, true}}, {"cyan", {false, true, true}}};
    EXPECT_EQ((std::array<bool, 3>{red, green, blue}), want.at(word)) << i << " " << word;
    // A corner of the image far from the box is background.
    for (float v : s.pixels) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
  }
}

TEST(Shapes, PatchesAndSequenceLayout) {
  ShapesTask t = *ShapesTask::Create({.image_size = 8, .patch = 4, .seed = 5});
  EXPECT_EQ(t.num_patches(), 4);
  EXPECT_EQ(t.patch_dim(), 48);
  const Sample s = t.Make(kTrain, 3);
  const std::vector<float> p = t.Patches(s);
  // Patch 1 (top right), its pixel (y=2, x=3), channel 1.
  EXPECT_EQ(p[1 * 48 + (2 * 4 + 3) * 3 + 1], s.pixels[(2 * 8 + 4 + 3) * 3 + 1]);
  std::vector<int32_t> tok(t.sequence_length()), tgt(t.sequence_length());
  t.Sequence(s, tok.data(), tgt.data());
  EXPECT_EQ(tok, (std::vector<int32_t>{0, 0, 0, 0, 1, 3, s.caption[2], s.caption[3], s.caption[4]}));
  EXPECT_EQ(tgt, (std::vector<int32_t>{-1, -1, -1, -1, 3, s.caption[2], s.caption[3], s.caption[4], 2}));
  EXPECT_EQ(ShapesTask::Decode(s.caption.data(), 6).substr(0, 2), "a ");
}

TEST(Shapes, BadConfigIsNamed) {
  auto t = ShapesTask::Create({.image_size = 10, .patch = 4});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("multiple of patch"), std::string::npos);
}

}  // namespace
}  // namespace gtp::data::shapes
