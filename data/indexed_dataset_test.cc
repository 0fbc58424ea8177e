#include "data/indexed_dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

std::string TempPrefix(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

template <typename T>
void Put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// The acceptance check: known tokens written by the helper come back exactly,
// document boundaries included, for every integer dtype.
TEST(IndexedDataset, RoundTripsTokensAndDocumentBoundaries) {
  const std::vector<std::vector<int32_t>> docs = {
      {1, 2, 3, 4, 5}, {}, {7}, {100, 0, 127, 42, 9, 8, 7, 6, 5, 4, 3, 2, 1}};
  for (IndexDType dtype : {IndexDType::kU8, IndexDType::kI8, IndexDType::kI16, IndexDType::kU16,
                           IndexDType::kI32, IndexDType::kI64}) {
    SCOPED_TRACE(IndexDTypeName(dtype));
    const std::string prefix = TempPrefix(std::string("roundtrip_") + IndexDTypeName(dtype));
    ASSERT_TRUE(WriteIndexedDataset(prefix, dtype, docs).ok());
    auto ds = IndexedDataset::Open(prefix);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ((*ds)->dtype(), dtype);
    EXPECT_EQ((*ds)->num_sequences(), docs.size());
    ASSERT_EQ((*ds)->num_documents(), docs.size());
    EXPECT_EQ((*ds)->document_index(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ((*ds)->num_tokens(), 19u);
    uint64_t pointer = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      EXPECT_EQ((*ds)->Document(d), docs[d]) << "document " << d;
      EXPECT_EQ((*ds)->sequence_length(d), docs[d].size());
      EXPECT_EQ((*ds)->sequence_pointer(d), pointer);
      pointer += docs[d].size() * IndexDTypeSize(dtype);
    }
    EXPECT_EQ(ReadFile(BinPath(prefix)).size(), pointer);
  }
}

TEST(IndexedDataset, DocumentsOfSeveralSequences) {
  const std::string prefix = TempPrefix("multi");
  auto w = IndexedDatasetWriter::Create(prefix, IndexDType::kU16);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->AddSequence({1, 2}).ok());
  ASSERT_TRUE((*w)->AddSequence({3}).ok());
  ASSERT_TRUE((*w)->AddSequence({4, 5, 6}).ok());
  ASSERT_TRUE((*w)->EndDocument().ok());
  ASSERT_TRUE((*w)->EndDocument().ok());  // an empty document
  ASSERT_TRUE((*w)->AddSequence({60000, 7}).ok());
  ASSERT_TRUE((*w)->Finish().ok());  // closes the pending document
  EXPECT_FALSE((*w)->AddSequence({1}).ok());

  auto ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_sequences(), 4u);
  EXPECT_EQ((*ds)->document_index(), (std::vector<int64_t>{0, 3, 3, 4}));
  ASSERT_EQ((*ds)->num_documents(), 3u);
  EXPECT_EQ((*ds)->Document(0), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ((*ds)->Document(1), (std::vector<int32_t>{}));
  EXPECT_EQ((*ds)->Document(2), (std::vector<int32_t>{60000, 7}));
  // A read that starts inside one sequence and ends inside another.
  int32_t buf[4];
  (*ds)->Read(0, 1, 4, buf);
  EXPECT_EQ(std::vector<int32_t>(buf, buf + 4), (std::vector<int32_t>{2, 3, 4, 5}));
}

// Byte-exact layout of Megatron-LM's _IndexWriter for a tiny dataset.
TEST(IndexedDataset, WritesMegatronLayout) {
  const std::string prefix = TempPrefix("layout");
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kU16, {{1, 2, 3}, {4}}).ok());
  std::string idx("MMIDIDX\0\0", 9);
  Put<uint64_t>(&idx, 1);  // version
  Put<uint8_t>(&idx, 8);   // uint16
  Put<uint64_t>(&idx, 2);  // sequences
  Put<uint64_t>(&idx, 3);  // document-index entries
  Put<int32_t>(&idx, 3);
  Put<int32_t>(&idx, 1);  // lengths
  Put<int64_t>(&idx, 0);
  Put<int64_t>(&idx, 6);  // byte pointers
  Put<int64_t>(&idx, 0);
  Put<int64_t>(&idx, 1);
  Put<int64_t>(&idx, 2);  // document index
  EXPECT_EQ(ReadFile(IndexPath(prefix)), idx);
  EXPECT_EQ(ReadFile(BinPath(prefix)), std::string("\1\0\2\0\3\0\4\0", 8));
}

TEST(IndexedDataset, ToleratesTrailingIndexFields) {
  const std::string prefix = TempPrefix("trailing");
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kU8, {{1, 2}, {3}}).ok());
  WriteFile(IndexPath(prefix), ReadFile(IndexPath(prefix)) + std::string("\0\0", 2));  // modes
  auto ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->Document(1), (std::vector<int32_t>{3}));
}

// Writes a valid pair, lets `corrupt` edit the files, and returns Open's status.
absl::Status OpenCorrupted(const std::string& name,
                           void (*corrupt)(std::string* idx, std::string* bin)) {
  const std::string prefix = TempPrefix(name);
  EXPECT_TRUE(WriteIndexedDataset(prefix, IndexDType::kI32, {{1, 2, 3}, {4, 5}}).ok());
  std::string idx = ReadFile(IndexPath(prefix)), bin = ReadFile(BinPath(prefix));
  corrupt(&idx, &bin);
  WriteFile(IndexPath(prefix), idx);
  WriteFile(BinPath(prefix), bin);
  return IndexedDataset::Open(prefix).status();
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& file,
                 const std::string& words) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), file)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), words)) << s;
}

TEST(IndexedDataset, FormatErrorsNameTheFile) {
  ExpectError(OpenCorrupted("bad_magic", [](std::string* idx, std::string*) { (*idx)[0] = 'X'; }),
              absl::StatusCode::kInvalidArgument, "bad_magic.idx", "bad magic");
  ExpectError(OpenCorrupted("bad_version", [](std::string* idx, std::string*) { (*idx)[9] = 2; }),
              absl::StatusCode::kInvalidArgument, "bad_version.idx", "version 2");
  ExpectError(OpenCorrupted("bad_dtype", [](std::string* idx, std::string*) { (*idx)[17] = 9; }),
              absl::StatusCode::kInvalidArgument, "bad_dtype.idx", "dtype code 9");
  ExpectError(OpenCorrupted("float_dtype", [](std::string* idx, std::string*) { (*idx)[17] = 7; }),
              absl::StatusCode::kInvalidArgument, "float_dtype.idx", "float32");
  ExpectError(
      OpenCorrupted("short_header", [](std::string* idx, std::string*) { idx->resize(20); }),
      absl::StatusCode::kDataLoss, "short_header.idx", "truncated");
  ExpectError(OpenCorrupted("empty_idx", [](std::string* idx, std::string*) { idx->clear(); }),
              absl::StatusCode::kDataLoss, "empty_idx.idx", "truncated");
  ExpectError(OpenCorrupted("short_arrays",
                            [](std::string* idx, std::string*) { idx->resize(idx->size() - 1); }),
              absl::StatusCode::kDataLoss, "short_arrays.idx", "truncated");
  ExpectError(OpenCorrupted("short_bin", [](std::string*, std::string* bin) { bin->resize(17); }),
              absl::StatusCode::kDataLoss, "short_bin.bin", "truncated");
  ExpectError(OpenCorrupted("bad_doc_index",
                            [](std::string* idx, std::string*) {
                              (*idx)[idx->size() - 8] = 5;  // last entry 2 -> 5
                            }),
              absl::StatusCode::kDataLoss, "bad_doc_index.idx", "document index");
  // An index whose dtype does not match its .bin (u8 over these i32 tokens), and a .bin with
  // bytes no sequence covers: both used to open and yield garbage tokens.
  ExpectError(OpenCorrupted("wrong_dtype", [](std::string* idx, std::string*) { (*idx)[17] = 1; }),
              absl::StatusCode::kDataLoss, "wrong_dtype.bin",
              "sequence 1 starts at byte 12 but the sequences before it end at byte 3 (the index "
              "says uint8, 1-byte tokens");
  ExpectError(OpenCorrupted("long_bin", [](std::string*, std::string* bin) { bin->append(4, '\0'); }),
              absl::StatusCode::kDataLoss, "long_bin.bin",
              "the index's sequences cover 20 bytes but the file has 24");
}

TEST(IndexedDataset, MissingFilesAreNotFound) {
  const std::string prefix = TempPrefix("missing");
  ExpectError(IndexedDataset::Open(prefix).status(), absl::StatusCode::kNotFound, "missing.idx",
              "cannot open");
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kU8, {{1}}).ok());
  std::remove(BinPath(prefix).c_str());
  ExpectError(IndexedDataset::Open(prefix).status(), absl::StatusCode::kNotFound, "missing.bin",
              "cannot open");
}

// An int64 token beyond int32 used to abort the trainer on a CHECK when a
// batch reached it; Open refuses it, naming the file, the position and value.
TEST(IndexedDataset, Int64TokensBeyondInt32AreRefusedAtOpen) {
  const std::string prefix = TempPrefix("wide");
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kI64, {{1, 2, 3}}).ok());
  ASSERT_TRUE(IndexedDataset::Open(prefix).ok());
  std::string bin = ReadFile(BinPath(prefix));
  ASSERT_EQ(bin.size(), 24u);
  const int64_t wide = int64_t{1} << 32;
  bin.replace(8, 8, reinterpret_cast<const char*>(&wide), 8);
  WriteFile(BinPath(prefix), bin);
  ExpectError(IndexedDataset::Open(prefix).status(), absl::StatusCode::kInvalidArgument, "wide.bin",
              "token 1 is 4294967296, which does not fit int32");
}

// A .bin cut in place while a run reads it used to fault (SIGBUS) on the
// next read past its new end: CheckIntact names it first.
TEST(IndexedDataset, AFileThatShrankUnderTheReaderIsNamed) {
  const std::string prefix = TempPrefix("shrinks");
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kU16, {{1, 2, 3}, {4, 5}}).ok());
  auto ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE((*ds)->CheckIntact().ok());
  ASSERT_EQ(truncate(BinPath(prefix).c_str(), 4), 0);
  ExpectError((*ds)->CheckIntact(), absl::StatusCode::kDataLoss, "shrinks.bin",
              "shrank from 10 to 4 bytes while the run was reading it");
}

// A directory where a data file should be said "cannot mmap: No such device".
TEST(IndexedDataset, ADirectoryIsNamed) {
  const std::string prefix = TempPrefix("dir_bin");
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kU8, {{1}}).ok());
  std::remove(BinPath(prefix).c_str());
  ASSERT_EQ(mkdir(BinPath(prefix).c_str(), 0755), 0);
  ExpectError(IndexedDataset::Open(prefix).status(), absl::StatusCode::kInvalidArgument, "dir_bin.bin",
              "is a directory");
}

TEST(IndexedDatasetWriter, RejectsTokensThatDoNotFitAndCleansUp) {
  const std::string prefix = TempPrefix("unfinished");
  {
    auto w = IndexedDatasetWriter::Create(prefix, IndexDType::kU8);
    ASSERT_TRUE(w.ok());
    absl::Status s = (*w)->AddDocument({1, 256});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "256")) << s;
    ASSERT_TRUE((*w)->AddDocument({1, 255}).ok());
    EXPECT_TRUE(Exists(BinPath(prefix) + ".tmp"));
  }  // destroyed without Finish
  EXPECT_FALSE(Exists(BinPath(prefix) + ".tmp"));
  EXPECT_FALSE(Exists(BinPath(prefix)));
  EXPECT_FALSE(Exists(IndexPath(prefix)));
  EXPECT_FALSE(IndexedDatasetWriter::Create(prefix, IndexDType::kF32).ok());
}

TEST(IndexDType, NamesAndChoices) {
  EXPECT_EQ(*ParseIndexDType("u16"), IndexDType::kU16);
  EXPECT_EQ(*ParseIndexDType("int32"), IndexDType::kI32);
  EXPECT_FALSE(ParseIndexDType("f32").ok());
  EXPECT_EQ(OptimalIndexDType(50257), IndexDType::kU16);
  EXPECT_EQ(OptimalIndexDType(128256), IndexDType::kI32);
  EXPECT_EQ(IndexDTypeSize(IndexDType::kF64), 8u);
}

}  // namespace
}  // namespace gtp::data
