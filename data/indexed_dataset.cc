#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34

template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool IsIntegerDType(IndexDType d) { return d != IndexDType::kF32 && d != IndexDType::kF64; }

absl::Status ErrnoError(int err, const std::string& what) { return absl::ErrnoToStatus(err, what); }

// Converts `count` elements of type T at `src` (any alignment) to int32.
template <typename T>
void Convert(const unsigned char* src, size_t count, int32_t* out) {
  for (size_t i = 0; i < count; ++i) {
    T v = Load<T>(src + i * sizeof(T));
    if constexpr (sizeof(T) > sizeof(int32_t)) {
      GTP_CHECK(
          v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
          "token ", v, " does not fit int32");
    }
    out[i] = static_cast<int32_t>(v);
  }
}

}  // namespace

size_t IndexDTypeSize(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::kU8:
      return 1;
    case IndexDType::kI8:
      return 1;
    case IndexDType::kI16:
      return 2;
    case IndexDType::kI32:
      return 4;
    case IndexDType::kI64:
      return 8;
    case IndexDType::kF64:
      return 8;
    case IndexDType::kF32:
      return 4;
    case IndexDType::kU16:
      return 2;
  }
  return 0;
}

const char* IndexDTypeName(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::kU8:
      return "uint8";
    case IndexDType::kI8:
      return "int8";
    case IndexDType::kI16:
      return "int16";
    case IndexDType::kI32:
      return "int32";
    case IndexDType::kI64:
      return "int64";
    case IndexDType::kF64:
      return "float64";
    case IndexDType::kF32:
      return "float32";
    case IndexDType::kU16:
      return "uint16";
  }
  return "unknown";
}

absl::StatusOr<IndexDType> ParseIndexDType(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "u8" || n == "uint8") return IndexDType::kU8;
  if (n == "i8" || n == "int8") return IndexDType::kI8;
  if (n == "i16" || n == "int16") return IndexDType::kI16;
  if (n == "u16" || n == "uint16") return IndexDType::kU16;
  if (n == "i32" || n == "int32") return IndexDType::kI32;
  if (n == "i64" || n == "int64") return IndexDType::kI64;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown token dtype \"", name, "\" (expected u8, i8, i16, u16, i32 or i64)"));
}

IndexDType OptimalIndexDType(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::kU16 : IndexDType::kI32;
}

// ---- reader -----------------------------------------------------------------

// A read-only mapping of a whole file (no mapping for an empty file).
struct IndexedDataset::Mapping {
  std::string path;
  const unsigned char* data = nullptr;
  size_t size = 0;

  int fd = -1;  // kept open: CheckIntact compares its size with the mapping's

  ~Mapping() {
    if (data != nullptr) munmap(const_cast<unsigned char*>(data), size);
    if (fd >= 0) ::close(fd);
  }

  // A file cut in place after it was mapped makes a read past its new end
  // fault (SIGBUS): DataLoss naming it instead, before reading.
  absl::Status CheckIntact() const {
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) return absl::OkStatus();
    if (static_cast<size_t>(st.st_size) < size) {
      return absl::DataLossError(absl::StrCat(
          path, " shrank from ", size, " to ", st.st_size,
          " bytes while the run was reading it (changed in place under a running job): restore it "
          "and resume from the last checkpoint"));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<std::unique_ptr<Mapping>> Open(const std::string& path) {
    // O_NONBLOCK: a FIFO must not block the open (it is refused below).
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot open ", path));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError(err, absl::StrCat("cannot stat ", path));
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (a FIFO or a device)"));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a directory: a dataset is named by the prefix of its PREFIX.idx and "
                "PREFIX.bin files"));
    }
    auto m = std::make_unique<Mapping>();
    m->path = path;
    m->size = static_cast<size_t>(st.st_size);
    if (m->size > 0) {
      void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        return ErrnoError(err, absl::StrCat("cannot mmap ", path));
      }
      m->data = static_cast<const unsigned char*>(p);
    }
    m->fd = fd;
    return m;
  }
};

IndexedDataset::~IndexedDataset() = default;

absl::StatusOr<std::shared_ptr<IndexedDataset>> IndexedDataset::Open(
    const std::string& path_prefix) {
  std::shared_ptr<IndexedDataset> ds(new IndexedDataset());
  ds->prefix_ = path_prefix;
  const std::string idx_path = IndexPath(path_prefix), bin_path = BinPath(path_prefix);
  GTP_ASSIGN_OR_RETURN(ds->idx_, Mapping::Open(idx_path));
  GTP_ASSIGN_OR_RETURN(ds->bin_, Mapping::Open(bin_path));
  const unsigned char* p = ds->idx_->data;
  const size_t size = ds->idx_->size;

  // Header.
  if (size > 0 && std::memcmp(p, kMagic, std::min(size, sizeof(kMagic))) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        idx_path, ": not a Megatron MMIDIDX index (bad magic; expected \"MMIDIDX\\0\\0\")"));
  }
  if (size < kHeaderBytes) {  // includes a file cut inside the magic
    return absl::DataLossError(
        absl::StrCat(idx_path, ": truncated: ", size, " bytes, the header needs ", kHeaderBytes));
  }
  uint64_t version = Load<uint64_t>(p + 9);
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(idx_path, ": unsupported index version ",
                                                   version, " (expected ", kVersion, ")"));
  }
  uint8_t code = p[17];
  ds->dtype_ = static_cast<IndexDType>(code);
  ds->item_size_ = IndexDTypeSize(ds->dtype_);
  if (ds->item_size_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(idx_path, ": unknown dtype code ", code, " (expected 1..8)"));
  }
  if (!IsIntegerDType(ds->dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat(idx_path, ": holds ", IndexDTypeName(ds->dtype_),
                                                   " values; token ids must be integers"));
  }
  const uint64_t num_seq = Load<uint64_t>(p + 18), num_doc = Load<uint64_t>(p + 26);

  // Arrays: compare counts against the file size first so a corrupt count
  // cannot overflow the byte arithmetic.
  const size_t body = size - kHeaderBytes;
  if (num_seq > body / 12 || num_doc > (body - num_seq * 12) / 8) {
    return absl::DataLossError(
        absl::StrCat(idx_path, ": truncated: ", size, " bytes are too few for the ", num_seq,
                     " sequences and ", num_doc, " document-index entries its header promises"));
  }
  if (num_doc < 1) {
    return absl::DataLossError(
        absl::StrCat(idx_path, ": the document index is empty (needs at least the leading 0)"));
  }
  ds->num_sequences_ = num_seq;
  ds->num_doc_entries_ = num_doc;
  ds->lengths_ = p + kHeaderBytes;
  ds->pointers_ = ds->lengths_ + 4 * num_seq;
  ds->doc_idx_ = ds->pointers_ + 8 * num_seq;

  // Sequences lie inside .bin, one after another from byte 0 to its end
  // (Megatron writes them so): an index of another dtype or of another
  // dataset's .bin would otherwise read garbage tokens silently.
  const uint64_t bin_size = ds->bin_->size;
  uint64_t next = 0;  // where the next sequence must start
  const std::string described =
      absl::StrCat(" (the index says ", IndexDTypeName(ds->dtype_), ", ", ds->item_size_,
                   "-byte tokens: was the .bin written with another dtype, or is it another "
                   "dataset's?)");
  for (size_t s = 0; s < num_seq; ++s) {
    int32_t len = Load<int32_t>(ds->lengths_ + 4 * s);
    int64_t ptr = Load<int64_t>(ds->pointers_ + 8 * s);
    if (len < 0) {
      return absl::DataLossError(
          absl::StrCat(idx_path, ": sequence ", s, " has negative length ", len));
    }
    uint64_t bytes = static_cast<uint64_t>(len) * ds->item_size_;
    if (ptr < 0 || static_cast<uint64_t>(ptr) > bin_size ||
        bytes > bin_size - static_cast<uint64_t>(ptr)) {
      return absl::DataLossError(absl::StrCat(bin_path, ": truncated (or a wrong index): sequence ",
                                              s, " spans ", bytes, " bytes from offset ", ptr,
                                              " but the file has ", bin_size, " bytes"));
    }
    if (static_cast<uint64_t>(ptr) != next) {
      return absl::DataLossError(absl::StrCat(bin_path, ": sequence ", s, " starts at byte ", ptr,
                                              " but the sequences before it end at byte ", next,
                                              described));
    }
    next += bytes;
  }
  if (next != bin_size) {
    return absl::DataLossError(absl::StrCat(bin_path, ": the index's sequences cover ", next,
                                            " bytes but the file has ", bin_size, described));
  }

  // Document index: 0, non-decreasing, ends at the sequence count.
  int64_t prev = Load<int64_t>(ds->doc_idx_);
  if (prev != 0) {
    return absl::DataLossError(
        absl::StrCat(idx_path, ": document index starts at ", prev, " (expected 0)"));
  }
  ds->doc_lengths_.reserve(num_doc - 1);
  for (size_t d = 1; d < num_doc; ++d) {
    int64_t cur = Load<int64_t>(ds->doc_idx_ + 8 * d);
    if (cur < prev || static_cast<uint64_t>(cur) > num_seq) {
      return absl::DataLossError(absl::StrCat(idx_path, ": document index entry ", d, " is ", cur,
                                              " after ", prev, " (", num_seq, " sequences)"));
    }
    uint64_t len = 0;
    for (int64_t s = prev; s < cur; ++s) len += Load<int32_t>(ds->lengths_ + 4 * s);
    ds->doc_lengths_.push_back(len);
    ds->num_tokens_ += len;
    prev = cur;
  }
  if (static_cast<uint64_t>(prev) != num_seq) {
    return absl::DataLossError(absl::StrCat(idx_path, ": document index ends at sequence ", prev,
                                            " but there are ", num_seq, " sequences"));
  }
  // Tokens are int32 from here on: an int64 dataset is scanned once (the
  // other dtypes fit by construction).
  if (ds->dtype_ == IndexDType::kI64) {
    const unsigned char* b = ds->bin_->data;
    for (uint64_t i = 0; i < bin_size / 8; ++i) {
      const int64_t v = Load<int64_t>(b + 8 * i);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            bin_path, ": token ", i, " is ", v,
            ", which does not fit int32 (token ids must be below 2^31; rewrite the dataset with "
            "ids of its tokenizer's vocabulary)"));
      }
    }
  }
  return ds;
}

absl::Status IndexedDataset::CheckIntact() const {
  GTP_RETURN_IF_ERROR(idx_->CheckIntact());
  return bin_->CheckIntact();
}

size_t IndexedDataset::sequence_length(size_t seq) const {
  GTP_CHECK(seq < num_sequences_, "sequence ", seq, " of ", num_sequences_);
  return static_cast<size_t>(Load<int32_t>(lengths_ + 4 * seq));
}

uint64_t IndexedDataset::sequence_pointer(size_t seq) const {
  GTP_CHECK(seq < num_sequences_, "sequence ", seq, " of ", num_sequences_);
  return static_cast<uint64_t>(Load<int64_t>(pointers_ + 8 * seq));
}

std::vector<int64_t> IndexedDataset::document_index() const {
  std::vector<int64_t> out(num_doc_entries_);
  for (size_t d = 0; d < num_doc_entries_; ++d) out[d] = Load<int64_t>(doc_idx_ + 8 * d);
  return out;
}

void IndexedDataset::ReadSequence(size_t seq, size_t offset, size_t count, int32_t* out) const {
  size_t len = sequence_length(seq);
  GTP_CHECK(offset <= len && count <= len - offset, "read [", offset, ", +", count,
            ") of sequence ", seq, " with ", len, " tokens in ", prefix_);
  if (count == 0) return;
  const unsigned char* src = bin_->data + sequence_pointer(seq) + offset * item_size_;
  switch (dtype_) {
    case IndexDType::kU8:
      Convert<uint8_t>(src, count, out);
      break;
    case IndexDType::kI8:
      Convert<int8_t>(src, count, out);
      break;
    case IndexDType::kI16:
      Convert<int16_t>(src, count, out);
      break;
    case IndexDType::kU16:
      Convert<uint16_t>(src, count, out);
      break;
    case IndexDType::kI32:
      Convert<int32_t>(src, count, out);
      break;
    case IndexDType::kI64:
      Convert<int64_t>(src, count, out);
      break;
    default:
      GTP_CHECK(false, "float dtype in ", prefix_);
  }
}

size_t IndexedDataset::DocumentFirstSequence(size_t doc) const {
  return static_cast<size_t>(Load<int64_t>(doc_idx_ + 8 * doc));
}

size_t IndexedDataset::document_length(size_t doc) const {
  GTP_CHECK(doc < doc_lengths_.size(), "document ", doc, " of ", doc_lengths_.size());
  return doc_lengths_[doc];
}

void IndexedDataset::Read(size_t doc, size_t offset, size_t count, int32_t* out) const {
  size_t len = document_length(doc);
  GTP_CHECK(offset <= len && count <= len - offset, "read [", offset, ", +", count,
            ") of document ", doc, " with ", len, " tokens in ", prefix_);
  for (size_t s = DocumentFirstSequence(doc); count > 0; ++s) {
    size_t slen = sequence_length(s);
    if (offset >= slen) {
      offset -= slen;
      continue;
    }
    size_t n = std::min(count, slen - offset);
    ReadSequence(s, offset, n, out);
    out += n;
    count -= n;
    offset = 0;
  }
}

// ---- writer -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    const std::string& prefix, IndexDType dtype) {
  if (IndexDTypeSize(dtype) == 0 || !IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("indexed dataset ", prefix,
                                                   ": token dtype must be an integer type, got ",
                                                   IndexDTypeName(dtype)));
  }
  std::unique_ptr<IndexedDatasetWriter> w(new IndexedDatasetWriter());
  w->prefix_ = prefix;
  w->dtype_ = dtype;
  w->item_size_ = IndexDTypeSize(dtype);
  const std::string tmp = BinPath(prefix) + ".tmp";
  // The output's directory is made, as `mkdir -p` would (a missing one used
  // to fail with "cannot create ...").
  const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("indexed dataset ", prefix, ": cannot create directory ", dir.string(), ": ",
                       ec.message()));
    }
  }
  w->bin_ = std::fopen(tmp.c_str(), "wb");
  if (w->bin_ == nullptr) return ErrnoError(errno, absl::StrCat("cannot create ", tmp));
  return w;
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_) Abandon();
}

void IndexedDatasetWriter::Abandon() {
  if (bin_ != nullptr) std::fclose(bin_);
  bin_ = nullptr;
  std::remove((BinPath(prefix_) + ".tmp").c_str());
  std::remove((IndexPath(prefix_) + ".tmp").c_str());
  finished_ = true;
}

absl::Status IndexedDatasetWriter::AddSequence(absl::Span<const int32_t> tokens) {
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat("indexed dataset ", prefix_, ": AddSequence after Finish"));
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("indexed dataset ", prefix_, ": sequence of ",
                                                   tokens.size(), " tokens exceeds int32"));
  }
  int64_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  switch (dtype_) {
    case IndexDType::kU8:
      lo = 0;
      hi = 255;
      break;
    case IndexDType::kI8:
      lo = -128;
      hi = 127;
      break;
    case IndexDType::kI16:
      lo = -32768;
      hi = 32767;
      break;
    case IndexDType::kU16:
      lo = 0;
      hi = 65535;
      break;
    default:
      break;
  }
  buffer_.resize(tokens.size() * item_size_);
  unsigned char* dst = buffer_.data();
  for (size_t i = 0; i < tokens.size(); ++i, dst += item_size_) {
    int32_t t = tokens[i];
    if (t < lo || t > hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "indexed dataset ", prefix_, ": token ", t, " (position ", i, " of sequence ",
          lengths_.size(), ") does not fit ", IndexDTypeName(dtype_)));
    }
    switch (dtype_) {
      case IndexDType::kU8: {
        uint8_t v = t;
        std::memcpy(dst, &v, 1);
        break;
      }
      case IndexDType::kI8: {
        int8_t v = t;
        std::memcpy(dst, &v, 1);
        break;
      }
      case IndexDType::kI16: {
        int16_t v = t;
        std::memcpy(dst, &v, 2);
        break;
      }
      case IndexDType::kU16: {
        uint16_t v = t;
        std::memcpy(dst, &v, 2);
        break;
      }
      case IndexDType::kI32:
        std::memcpy(dst, &t, 4);
        break;
      default: {
        int64_t v = t;
        std::memcpy(dst, &v, 8);
        break;
      }
    }
  }
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size()) {
    return ErrnoError(errno, absl::StrCat("cannot write ", BinPath(prefix_), ".tmp"));
  }
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::EndDocument() {
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat("indexed dataset ", prefix_, ": EndDocument after Finish"));
  }
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const int32_t> tokens) {
  GTP_RETURN_IF_ERROR(AddSequence(tokens));
  return EndDocument();
}

absl::Status IndexedDatasetWriter::Finish() {
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat("indexed dataset ", prefix_, ": Finish called twice"));
  }
  if (static_cast<size_t>(doc_idx_.back()) != lengths_.size()) GTP_RETURN_IF_ERROR(EndDocument());
  const std::string bin_tmp = BinPath(prefix_) + ".tmp", idx_tmp = IndexPath(prefix_) + ".tmp";
  absl::Status status;
  if (std::fflush(bin_) != 0 || ::fsync(::fileno(bin_)) != 0) {
    status = ErrnoError(errno, absl::StrCat("cannot write ", bin_tmp));
  }
  if (std::fclose(bin_) != 0 && status.ok()) {
    status = ErrnoError(errno, absl::StrCat("cannot close ", bin_tmp));
  }
  bin_ = nullptr;
  if (!status.ok()) {
    Abandon();
    return status;
  }

  // Index: header, lengths, pointers, document index.
  std::string idx(kMagic, sizeof(kMagic));
  auto put = [&idx](const auto& v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(kVersion);
  put(static_cast<uint8_t>(dtype_));
  put(static_cast<uint64_t>(lengths_.size()));
  put(static_cast<uint64_t>(doc_idx_.size()));
  idx.append(reinterpret_cast<const char*>(lengths_.data()), lengths_.size() * sizeof(int32_t));
  int64_t ptr = 0;
  for (int32_t len : lengths_) {
    put(ptr);
    ptr += static_cast<int64_t>(len) * static_cast<int64_t>(item_size_);
  }
  idx.append(reinterpret_cast<const char*>(doc_idx_.data()), doc_idx_.size() * sizeof(int64_t));

  std::FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  if (f == nullptr) {
    status = ErrnoError(errno, absl::StrCat("cannot create ", idx_tmp));
  } else {
    if (std::fwrite(idx.data(), 1, idx.size(), f) != idx.size() || std::fflush(f) != 0 ||
        ::fsync(::fileno(f)) != 0) {
      status = ErrnoError(errno, absl::StrCat("cannot write ", idx_tmp));
    }
    if (std::fclose(f) != 0 && status.ok()) {
      status = ErrnoError(errno, absl::StrCat("cannot close ", idx_tmp));
    }
  }
  if (status.ok() && std::rename(bin_tmp.c_str(), BinPath(prefix_).c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat("cannot rename ", bin_tmp));
  }
  if (status.ok() && std::rename(idx_tmp.c_str(), IndexPath(prefix_).c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat("cannot rename ", idx_tmp));
  }
  if (!status.ok()) {
    Abandon();
    return status;
  }
  finished_ = true;
  return absl::OkStatus();
}

absl::Status WriteIndexedDataset(const std::string& prefix, IndexDType dtype,
                                 const std::vector<std::vector<int32_t>>& documents) {
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> w,
                       IndexedDatasetWriter::Create(prefix, dtype));
  for (const auto& doc : documents) GTP_RETURN_IF_ERROR(w->AddDocument(doc));
  return w->Finish();
}

}  // namespace gtp::data
