// The checkpoint readers on damaged and inconsistent files, without a
// communicator: ReadCheckpointMetadata and ReadAllGlobal (whose piece reader
// and assembly Load shares). The inconsistent metadata cases came from
// tools/fuzz/checkpoint_data_fuzzer (docs/RELIABILITY.md): with a matching
// CRC they used to read out of bounds, abort in Shape, or allocate what a
// piece claimed.
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/metadata.pb.h"
#include "gtest/gtest.h"

namespace gtp::checkpoint {
namespace {

std::string Dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string d = std::string(t ? t : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

// metadata.pb with its trailer (CRC-32 little endian + "GTPM").
void WriteMetadata(const std::string& dir, const proto::Metadata& meta) {
  std::string bytes;
  meta.SerializeToString(&bytes);
  const uint32_t crc = Crc(bytes);
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  bytes += "GTPM";
  std::ofstream(dir + "/metadata.pb", std::ios::binary) << bytes;
}

// rank_00000.bin: the header, then `data`.
void WriteData(const std::string& dir, const std::string& data) {
  std::string header(16, '\0');
  std::memcpy(header.data(), "GTPCKPT", 8);
  header[8] = 1;
  std::ofstream(dir + "/rank_00000.bin", std::ios::binary) << header << data;
}

// A tensor w f32 [4, 3] saved as one piece of rows 0..3 at offset 16, and
// its 48 bytes.
proto::Metadata OnePiece(std::string* data) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = i;
  data->assign(reinterpret_cast<const char*>(v.data()), 48);
  proto::Metadata meta;
  meta.set_format_version(kFormatVersion);
  proto::TensorEntry* e = meta.add_tensors();
  e->set_key("w");
  e->set_dtype("f32");
  e->add_global_shape(4);
  e->add_global_shape(3);
  proto::Piece* p = e->add_pieces();
  proto::RowRun* run = p->add_runs();
  run->set_global_row(0);
  run->set_rows(4);
  p->set_cols(3);
  p->set_file("rank_00000.bin");
  p->set_offset(16);
  p->set_bytes(48);
  p->set_crc32(Crc(*data));
  return meta;
}

void ExpectDataLoss(const std::string& dir, const std::string& needle) {
  absl::StatusOr<std::vector<GlobalTensor>> all = ReadAllGlobal(dir);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss) << all.status();
  EXPECT_NE(all.status().message().find(needle), std::string::npos) << all.status();
}

TEST(ReadAllGlobal, ReadsAConsistentCheckpoint) {
  const std::string dir = Dir("ok");
  std::string data;
  WriteMetadata(dir, OnePiece(&data));
  WriteData(dir, data);
  absl::StatusOr<std::vector<GlobalTensor>> all = ReadAllGlobal(dir);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].shape, Shape({4, 3}));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*all)[0].bytes.data()), 48), data);
}

// The fuzzer's first crash: a piece whose bytes are fewer than its rows ×
// cols (here 24 bytes for 4 × 3 f32, CRC matching), so assembly copied past
// the piece's buffer (ASan: heap-buffer-overflow in Assemble).
TEST(ReadCheckpointMetadata, RefusesAPieceSmallerThanItsRows) {
  const std::string dir = Dir("short_piece");
  std::string data;
  proto::Metadata meta = OnePiece(&data);
  proto::Piece* p = meta.mutable_tensors(0)->mutable_pieces(0);
  p->set_bytes(24);
  p->set_crc32(Crc(data.substr(0, 24)));
  WriteMetadata(dir, meta);
  WriteData(dir, data);
  absl::StatusOr<proto::Metadata> m = ReadCheckpointMetadata(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("metadata.pb is inconsistent: tensor w has a piece of 4 × 3 "
                                      "elements in 24 bytes"),
            std::string::npos)
      << m.status();
  ExpectDataLoss(dir, "inconsistent");
}

TEST(ReadCheckpointMetadata, RefusesImpossibleShapesAndPieces) {
  struct Case {
    const char* what;
    void (*damage)(proto::TensorEntry*);
    const char* message;
  };
  const Case cases[] = {
      {"negative dim (aborted in Shape)", [](proto::TensorEntry* e) { e->set_global_shape(0, -4); },
       "impossible shape"},
      {"no dims", [](proto::TensorEntry* e) { e->clear_global_shape(); }, "has 0 dims"},
      {"unknown dtype", [](proto::TensorEntry* e) { e->set_dtype("f33"); }, "unknown dtype"},
      {"rows outside the tensor",
       [](proto::TensorEntry* e) { e->mutable_pieces(0)->mutable_runs(0)->set_global_row(1); },
       "rows [1, +4) outside its 4"},
      {"columns outside the tensor", [](proto::TensorEntry* e) { e->mutable_pieces(0)->set_col_offset(1); },
       "columns [1, +3) outside its 3"},
      {"a path for a file name",
       [](proto::TensorEntry* e) { e->mutable_pieces(0)->set_file("../rank_00000.bin"); },
       "a file name expected"},
  };
  for (const Case& c : cases) {
    const std::string dir = Dir("damaged");
    std::string data;
    proto::Metadata meta = OnePiece(&data);
    c.damage(meta.mutable_tensors(0));
    WriteMetadata(dir, meta);
    WriteData(dir, data);
    absl::StatusOr<proto::Metadata> m = ReadCheckpointMetadata(dir);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << c.what;
    EXPECT_NE(m.status().message().find(c.message), std::string::npos) << c.what << ": " << m.status();
  }
}

// A consistent but huge claim: 2^38 rows of f32 (1 TiB) in a 64-byte file.
// ReadAllGlobal allocated the whole tensor before reading a piece.
TEST(ReadAllGlobal, ChecksPiecesAgainstTheFilesBeforeAllocating) {
  const std::string dir = Dir("huge");
  std::string data;
  proto::Metadata meta = OnePiece(&data);
  proto::TensorEntry* e = meta.mutable_tensors(0);
  e->clear_global_shape();
  e->add_global_shape(int64_t{1} << 38);
  proto::Piece* p = e->mutable_pieces(0);
  p->mutable_runs(0)->set_rows(int64_t{1} << 38);
  p->set_cols(1);
  p->set_bytes(int64_t{1} << 40);
  WriteMetadata(dir, meta);
  WriteData(dir, data);
  ExpectDataLoss(dir, "rank_00000.bin is truncated: tensor w needs bytes [16, 1099511627792)");
}

TEST(ReadAllGlobal, RefusesATensorItsPiecesDoNotCover) {
  const std::string dir = Dir("uncovered");
  std::string data;
  proto::Metadata meta = OnePiece(&data);
  meta.mutable_tensors(0)->clear_pieces();
  WriteMetadata(dir, meta);
  WriteData(dir, data);
  ExpectDataLoss(dir, "no data for all of w");
}

}  // namespace
}  // namespace gtp::checkpoint
