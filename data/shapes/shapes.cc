#include "data/shapes/shapes.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/philox.h"

namespace gtp::data::shapes {

namespace {

constexpr int kSizes = 2, kColours = 6, kShapes = 4;
constexpr float kRgb[kColours][3] = {{0.9f, 0.1f, 0.1f}, {0.1f, 0.8f, 0.1f}, {0.15f, 0.25f, 0.95f},
                                     {0.9f, 0.9f, 0.1f}, {0.9f, 0.1f, 0.9f}, {0.1f, 0.9f, 0.9f}};

// Vocabulary offsets.
constexpr int32_t kA = 3, kSize0 = 4, kColour0 = kSize0 + kSizes, kShape0 = kColour0 + kColours;

// Whether pixel (x, y) of the extent×extent box lies in the shape.
bool Inside(int shape, int x, int y, int extent) {
  const float c = (extent - 1) / 2.0f, fx = x - c, fy = y - c, r = extent / 2.0f;
  switch (shape) {
    case 0: return true;                                  // square
    case 1: return fx * fx + fy * fy <= r * r;            // circle
    case 2: return std::fabs(fx) <= (y + 1) * 0.5f;       // triangle, apex up
    default: return std::fabs(fx) < r / 2.5f || std::fabs(fy) < r / 2.5f;  // cross
  }
}

}  // namespace

absl::Status ShapesConfig::Validate() const {
  if (image_size < 8 || patch < 1 || image_size % patch != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shapes: image_size (", image_size, ") must be ≥ 8 and a multiple of patch (", patch, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShapesTask> ShapesTask::Create(const ShapesConfig& c) {
  if (absl::Status st = c.Validate(); !st.ok()) return st;
  return ShapesTask(c);
}

const std::vector<std::string>& ShapesTask::Vocab() {
  static const std::vector<std::string>* v = new std::vector<std::string>{
      "<pad>", "<bos>", "<eos>", "a",       "small",  "large",  "red",    "green", "blue",
      "yellow", "magenta", "cyan", "square", "circle", "triangle", "cross"};
  return *v;
}

Sample ShapesTask::Make(Split split, int64_t index) const {
  const uint64_t key = c_.seed * 0x9E3779B97F4A7C15ull + split + 1;
  const int S = c_.image_size;
  // Draws 0..7: size, colour, shape, x, y; then per-pixel noise.
  const Philox4 a = PhiloxRaw(key, static_cast<uint64_t>(index), 0);
  const Philox4 b = PhiloxRaw(key, static_cast<uint64_t>(index), 1);
  Sample s;
  s.size = static_cast<int>(a.v[0] % kSizes);
  s.colour = static_cast<int>(a.v[1] % kColours);
  s.shape = static_cast<int>(a.v[2] % kShapes);
  s.extent = s.size == 0 ? std::max(4, S / 4) : std::max(6, S / 2);
  s.x0 = static_cast<int>(b.v[0] % static_cast<uint32_t>(S - s.extent + 1));
  s.y0 = static_cast<int>(b.v[1] % static_cast<uint32_t>(S - s.extent + 1));
  s.pixels.assign(static_cast<size_t>(S) * S * 3, 0.0f);
  const uint64_t noise_key = key ^ (static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ull + 7);
  for (int y = 0; y < S; ++y) {
    for (int x = 0; x < S; ++x) {
      const bool in = x >= s.x0 && x < s.x0 + s.extent && y >= s.y0 && y < s.y0 + s.extent &&
                      Inside(s.shape, x - s.x0, y - s.y0, s.extent);
      for (int ch = 0; ch < 3; ++ch) {
        const size_t i = (static_cast<size_t>(y) * S + x) * 3 + ch;
        const float noise = 0.1f * PhiloxUniform(noise_key, i);
        s.pixels[i] = (in ? kRgb[s.colour][ch] * 0.9f : 0.1f) + noise;
      }
    }
  }
  s.caption = {kBos, kA, kSize0 + s.size, kColour0 + s.colour, kShape0 + s.shape, kEos};
  return s;
}

std::vector<float> ShapesTask::Patches(const Sample& s) const {
  const int S = c_.image_size, P = c_.patch, np = S / P;
  std::vector<float> out(static_cast<size_t>(num_patches()) * patch_dim());
  size_t o = 0;
  for (int py = 0; py < np; ++py)
    for (int px = 0; px < np; ++px)
      for (int y = 0; y < P; ++y)
        for (int x = 0; x < P; ++x)
          for (int ch = 0; ch < 3; ++ch)
            out[o++] = s.pixels[(static_cast<size_t>(py * P + y) * S + px * P + x) * 3 + ch];
  return out;
}

void ShapesTask::Sequence(const Sample& s, int32_t* tokens, int32_t* targets) const {
  const int np = num_patches();
  for (int i = 0; i < np; ++i) {
    tokens[i] = kPad;
    targets[i] = -1;
  }
  for (int j = 0; j < kCaptionLength - 1; ++j) {
    tokens[np + j] = s.caption[j];
    targets[np + j] = s.caption[j + 1];
  }
}

std::string ShapesTask::Decode(const int32_t* ids, int n) {
  const auto& v = Vocab();
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (ids[i] == kEos) break;
    if (ids[i] == kBos || ids[i] == kPad) continue;
    if (!out.empty()) out += ' ';
    out += ids[i] >= 0 && ids[i] < static_cast<int32_t>(v.size()) ? v[ids[i]] : "?";
  }
  return out;
}

ShapesTask::Batch ShapesTask::MakeBatch(Split split, int64_t first, int64_t n) const {
  Batch b;
  const int L = sequence_length();
  b.tokens.resize(static_cast<size_t>(n) * L);
  b.targets.resize(static_cast<size_t>(n) * L);
  for (int64_t i = 0; i < n; ++i) {
    const Sample s = Make(split, first + i);
    const std::vector<float> p = Patches(s);
    b.patches.insert(b.patches.end(), p.begin(), p.end());
    Sequence(s, b.tokens.data() + i * L, b.targets.data() + i * L);
    b.ids.push_back(first + i);
  }
  return b;
}

}  // namespace gtp::data::shapes
