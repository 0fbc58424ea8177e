// data/indexed_dataset.h — Megatron-LM indexed datasets (.bin/.idx, MMIDIDX).
//
// A dataset is a pair of files sharing a prefix: PREFIX.bin holds the token
// ids of every sequence back to back; PREFIX.idx describes them. The index
// layout (little-endian, no padding; megatron/core/datasets/indexed_dataset.py):
//
//   offset  size       field
//   0       9          magic "MMIDIDX\0\0"
//   9       8          version, u64 = 1
//   17      1          dtype code, u8 (IndexDType)
//   18      8          S = sequence count, u64
//   26      8          D = document-index entries, u64 (documents + 1)
//   34      4·S        sequence lengths in tokens, int32
//   ..      8·S        sequence pointers: byte offsets into .bin, int64
//   ..      8·D        document index, int64: document d is sequences
//                      [doc_idx[d], doc_idx[d+1]); doc_idx[0] = 0, doc_idx[D-1] = S
//   ..      (S)        optional per-sequence modes, int8 (multimodal); ignored
//
// Arrays start at unaligned offsets (34 is not a multiple of 4), so the reader
// loads every field with memcpy. Bytes after the document index are ignored
// (readers tolerate added fields).
//
// As a TokenSource, a document is its sequences concatenated. Megatron's
// preprocess_data writes one sequence per document (with --append-eod the
// end-of-document token is part of the data), so documents and sequences
// coincide for ordinary GPT data.
//
//   GTP_ASSIGN_OR_RETURN(std::shared_ptr<IndexedDataset> ds,
//                        IndexedDataset::Open("/data/owt_text_document"));
//   std::vector<int32_t> doc = ds->Document(0);
//
//   GTP_ASSIGN_OR_RETURN(auto w, IndexedDatasetWriter::Create("/tmp/x", IndexDType::kU16));
//   GTP_RETURN_IF_ERROR(w->AddDocument({1, 2, 3}));
//   GTP_RETURN_IF_ERROR(w->Finish());
//
// Errors (Status, message names the file): NotFoundError for a missing file,
// InvalidArgumentError for bad magic, version or dtype code, DataLossError for
// truncated or inconsistent files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/token_source.h"

namespace gtp::data {

// Token element types of a .bin file, by their .idx code (Megatron's DType).
enum class IndexDType : uint8_t {
  kU8 = 1,
  kI8 = 2,
  kI16 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
  kF32 = 7,
  kU16 = 8,
};

// Bytes per element (0 for an unknown code).
size_t IndexDTypeSize(IndexDType dtype);

// "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"
// (NumPy's names, as Megatron prints them); "unknown" otherwise.
const char* IndexDTypeName(IndexDType dtype);

// Parses "u8"/"uint8", "i8"/"int8", ..., "u16"/"uint16" (integer types only).
absl::StatusOr<IndexDType> ParseIndexDType(const std::string& name);

// Megatron's choice for a vocabulary: uint16 when vocab_size < 65500, else
// int32. (Byte-level data fits uint8; the writer accepts any integer dtype.)
IndexDType OptimalIndexDType(int64_t vocab_size);

// Path helpers: PREFIX.idx and PREFIX.bin.
inline std::string IndexPath(const std::string& prefix) { return prefix + ".idx"; }
inline std::string BinPath(const std::string& prefix) { return prefix + ".bin"; }

// A read-only, memory-mapped Megatron indexed dataset.
//
// Open() validates the whole index (header, array sizes, document index
// monotone and complete, every sequence inside .bin), so reads never fail.
// Immutable afterwards: all methods are thread-safe; reads do not block
// beyond page faults. Token values are converted to int32 on read; Open
// refuses an int64 dataset with a value outside int32 (token ids are < 2^31).
class IndexedDataset final : public TokenSource {
 public:
  // Maps PREFIX.idx and PREFIX.bin. Float dtypes are rejected
  // (InvalidArgumentError): token ids are integers. Blocks on file I/O.
  static absl::StatusOr<std::shared_ptr<IndexedDataset>> Open(const std::string& path_prefix);

  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& path_prefix() const { return prefix_; }
  IndexDType dtype() const { return dtype_; }

  // Sequences (the .idx "sizes"/"pointers" arrays).
  size_t num_sequences() const { return num_sequences_; }
  size_t sequence_length(size_t seq) const;
  uint64_t sequence_pointer(size_t seq) const;  // byte offset in .bin
  // Copies tokens [offset, offset + count) of sequence `seq` into `out`.
  void ReadSequence(size_t seq, size_t offset, size_t count, int32_t* out) const;

  // The raw document index: num_documents() + 1 entries, entry d is the
  // first sequence of document d, the last entry is num_sequences().
  std::vector<int64_t> document_index() const;

  // TokenSource: document d = sequences [doc_idx[d], doc_idx[d+1]) concatenated.
  size_t num_documents() const override { return doc_lengths_.size(); }
  size_t document_length(size_t doc) const override;
  void Read(size_t doc, size_t offset, size_t count, int32_t* out) const override;
  uint64_t num_tokens() const override { return num_tokens_; }
  // DataLoss naming the file when .idx or .bin shrank since Open.
  absl::Status CheckIntact() const override;

 private:
  struct Mapping;
  IndexedDataset() = default;
  size_t DocumentFirstSequence(size_t doc) const;

  std::string prefix_;
  std::unique_ptr<Mapping> idx_, bin_;
  IndexDType dtype_ = IndexDType::kU8;
  size_t item_size_ = 1;
  size_t num_sequences_ = 0;
  size_t num_doc_entries_ = 0;
  const unsigned char* lengths_ = nullptr;   // int32[S], unaligned
  const unsigned char* pointers_ = nullptr;  // int64[S], unaligned
  const unsigned char* doc_idx_ = nullptr;   // int64[D], unaligned
  std::vector<uint64_t> doc_lengths_;        // tokens per document
  uint64_t num_tokens_ = 0;
};

// Writes a Megatron indexed dataset, streaming tokens to PREFIX.bin.
//
// Sequences are appended to the current document; EndDocument() closes it.
// Files are written as PREFIX.bin.tmp / PREFIX.idx.tmp and renamed into place
// by Finish(), so a crash never leaves a pair that looks complete; an
// unfinished writer removes its temporaries when destroyed. Not thread-safe;
// every method blocks on file I/O.
class IndexedDatasetWriter {
 public:
  // Opens PREFIX.bin.tmp. dtype must be an integer type.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix,
                                                                      IndexDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one sequence to the current document. InvalidArgumentError when
  // a token does not fit the dtype (nothing is written then).
  absl::Status AddSequence(absl::Span<const int32_t> tokens);

  // Closes the current document (the sequences added since the last call;
  // possibly none, which makes an empty document).
  absl::Status EndDocument();

  // AddSequence(tokens) then EndDocument(): one document of one sequence.
  absl::Status AddDocument(absl::Span<const int32_t> tokens);

  // Ends a pending document (if sequences were added since the last
  // EndDocument), writes the index and renames both files into place.
  // The writer accepts nothing afterwards.
  absl::Status Finish();

 private:
  IndexedDatasetWriter() = default;
  void Abandon();

  std::string prefix_;
  IndexDType dtype_ = IndexDType::kU8;
  size_t item_size_ = 1;
  std::FILE* bin_ = nullptr;
  bool finished_ = false;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_{0};
  std::vector<unsigned char> buffer_;  // one sequence, encoded
};

// Writes each of `documents` as one document of one sequence. Blocks.
absl::Status WriteIndexedDataset(const std::string& prefix, IndexDType dtype,
                                 const std::vector<std::vector<int32_t>>& documents);

}  // namespace gtp::data
