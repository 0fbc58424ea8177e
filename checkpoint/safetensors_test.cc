#include "checkpoint/safetensors.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "gtest/gtest.h"

namespace gtp::checkpoint {
namespace {

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

SafeTensor F32(Shape s, float start) {
  SafeTensor t;
  t.dtype = DType::kF32;
  t.shape = s;
  t.bytes.resize(s.numel() * 4);
  for (int64_t i = 0; i < s.numel(); ++i) {
    float v = start + i;
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  return t;
}

TEST(SafeTensors, RoundTrip) {
  SafeTensorsFile f;
  f.tensors["b.weight"] = F32({2, 3}, 1.0f);
  f.tensors["a"] = F32({5}, -2.0f);
  SafeTensor ids;
  ids.dtype = DType::kI32;
  ids.shape = Shape{2};
  ids.bytes = {7, 0, 0, 0, 9, 0, 0, 0};
  f.tensors["ids"] = ids;
  f.metadata["format"] = "pt";
  f.metadata["quote\"d"] = "x";
  const std::string path = TmpPath("rt.safetensors");
  ASSERT_TRUE(WriteSafeTensors(path, f).ok());
  auto r = ReadSafeTensors(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metadata.at("format"), "pt");
  EXPECT_EQ(r->metadata.at("quote\"d"), "x");
  EXPECT_EQ(r->tensors.at("b.weight").shape, Shape({2, 3}));
  EXPECT_EQ(r->tensors.at("b.weight").data<float>()[5], 6.0f);
  EXPECT_EQ(r->tensors.at("a").data<float>()[0], -2.0f);
  EXPECT_EQ(r->tensors.at("ids").data<int32_t>()[1], 9);
}

TEST(SafeTensors, ReadsAHandWrittenFile) {
  // Written byte by byte from the spec, independently of the writer.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header;
  float v[2] = {1.5f, -3.0f};
  file.append(reinterpret_cast<const char*>(v), 8);
  const std::string path = TmpPath("hand.safetensors");
  std::ofstream(path, std::ios::binary) << file;
  auto r = ReadSafeTensors(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tensors.at("x").data<float>()[1], -3.0f);
}

TEST(SafeTensors, CorruptFilesAreRejectedWithTheirName) {
  SafeTensorsFile f;
  f.tensors["w"] = F32({4}, 0.0f);
  const std::string path = TmpPath("trunc.safetensors");
  ASSERT_TRUE(WriteSafeTensors(path, f).ok());
  std::string all;
  {
    std::ifstream in(path, std::ios::binary);
    all.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << all.substr(0, all.size() - 3);
  auto r = ReadSafeTensors(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("trunc.safetensors"), std::string::npos) << r.status();
  EXPECT_EQ(ReadSafeTensors(TmpPath("missing.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
}

// A file of `header` (padded to 8 bytes) followed by `data`.
std::string WriteRaw(const std::string& name, std::string header, const std::string& data = "") {
  while (header.size() % 8) header += ' ';
  std::string all(8, '\0');
  for (int i = 0; i < 8; ++i) all[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string path = TmpPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << all << header << data;
  return path;
}

// Inputs found by tools/fuzz/safetensors_fuzzer (docs/RELIABILITY.md): each
// used to abort (an uncaught std::stoll exception, a stack overflow) or to
// pass a wrapped-around size check; each is now a DataLoss naming the file.
TEST(SafeTensors, RefusesMalformedNumbers) {
  for (const char* num : {"-", "99999999999999999999", "-99999999999999999999"}) {
    const std::string path = WriteRaw(
        "num.safetensors", std::string("{\"a\":{\"dtype\":\"F32\",\"shape\":[") + num + "],\"data_offsets\":[0,0]}}");
    auto r = ReadSafeTensors(path);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << num;
    EXPECT_NE(r.status().message().find("num.safetensors"), std::string::npos) << r.status();
  }
}

TEST(SafeTensors, RefusesDeepNesting) {
  const std::string path = WriteRaw("deep.safetensors", std::string(100000, '['));
  auto r = ReadSafeTensors(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("nested too deeply"), std::string::npos) << r.status();
}

TEST(SafeTensors, RefusesShapesWhoseSizeOverflows) {
  // 2^62 × 4 elements × 4 bytes wrapped around to 0 bytes = [0, 0).
  const std::string path = WriteRaw(
      "huge.safetensors",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}");
  auto r = ReadSafeTensors(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("too large"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace gtp::checkpoint
