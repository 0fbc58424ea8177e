// data/shapes/shapes.h — a synthetic image–caption task for vision-language
// (MIMO) training whose loss can fall only by looking at the image.
//
// Each sample is an RGB image (size×size, values in [0, 1]) with one shape on
// a noisy dark background, and its caption "a <size> <colour> <shape>":
//   sizes   small, large
//   colours red, green, blue, yellow, magenta, cyan
//   shapes  square, circle, triangle, cross
// Colour, shape, size and position are uniform and independent, so a model
// that ignores the image cannot do better than log(2·6·4) nats over the
// caption's three content words; one that reads the pixels can reach ~0.
//
// Word-level vocabulary (Vocab()): 0 <pad>, 1 <bos>, 2 <eos>, 3 "a", then
// the sizes, colours and shapes. A sample is a pure function of (seed,
// split, index) (Philox), so every rank of any layout can make any sample
// without drawing the others: the data of a global batch does not depend on
// how it is split over lanes.
//
// Language-model layout of one sample (SampleSequence): the image's
// num_patches() positions first (their token ids are <pad>: the MIMO model
// replaces those rows by the projected image features), then the caption
// <bos> a <size> <colour> <shape>, predicting a <size> <colour> <shape>
// <eos>; image positions have target −1 (ignored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gtp::data::shapes {

struct ShapesConfig {
  int image_size = 16;  // pixels per side
  int patch = 4;        // patch side (image_size % patch == 0)
  uint64_t seed = 1234;
  absl::Status Validate() const;
};

enum Split : uint32_t { kTrain = 0, kValid = 1 };

struct Sample {
  int size = 0, colour = 0, shape = 0;  // indices into the word lists
  int x0 = 0, y0 = 0, extent = 0;       // the shape's bounding square
  std::vector<float> pixels;            // [image_size, image_size, 3] row-major
  std::vector<int32_t> caption;         // <bos> a size colour shape <eos> (6 ids)
};

class ShapesTask {
 public:
  static absl::StatusOr<ShapesTask> Create(const ShapesConfig& c);

  const ShapesConfig& config() const { return c_; }
  static const std::vector<std::string>& Vocab();
  static int64_t vocab_size() { return static_cast<int64_t>(Vocab().size()); }
  static constexpr int kCaptionLength = 6;  // with <bos> and <eos>
  static constexpr int32_t kPad = 0, kBos = 1, kEos = 2;
  int num_patches() const { return (c_.image_size / c_.patch) * (c_.image_size / c_.patch); }
  int patch_dim() const { return c_.patch * c_.patch * 3; }
  // Language positions per sample: the image's patches and the caption's
  // five inputs.
  int sequence_length() const { return num_patches() + kCaptionLength - 1; }

  Sample Make(Split split, int64_t index) const;
  // The image cut into patches: [num_patches, patch·patch·3], patches in
  // row-major order, each patch's pixels row-major with RGB innermost.
  std::vector<float> Patches(const Sample& s) const;
  // tokens and targets of SampleSequence (each sequence_length() ids).
  void Sequence(const Sample& s, int32_t* tokens, int32_t* targets) const;
  // "a small red circle" from caption ids (stops at <eos>; unknown ids as "?").
  static std::string Decode(const int32_t* ids, int n);

  // A batch: samples [first, first + n) of `split`, as patches [n,
  // num_patches, patch_dim], tokens and targets [n, sequence_length()].
  struct Batch {
    std::vector<float> patches;
    std::vector<int32_t> tokens, targets;
    std::vector<int64_t> ids;  // the samples' indices
  };
  Batch MakeBatch(Split split, int64_t first, int64_t n) const;

 private:
  explicit ShapesTask(const ShapesConfig& c) : c_(c) {}
  ShapesConfig c_;
};

}  // namespace gtp::data::shapes
