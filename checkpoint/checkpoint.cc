#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/metadata.pb.h"
#include "core/status.h"

namespace gtp::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'G', 'T', 'P', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kHeaderBytes = 16;  // magic + u32 version + u32 reserved

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Errno("open " + path);
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("fsync " + path);
}

// Writes `data` to path.tmp and fsyncs it (the first half of WriteFileAtomic).
absl::Status WriteTmpFsynced(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Errno("create " + tmp);
    out.write(data.data(), data.size());
    if (!out) return Errno("write " + tmp);
  }
  return FsyncPath(tmp);
}

int64_t Cols(const TensorPiece& p) { return p.data.rank() >= 2 ? p.data.dim(1) : 1; }
int64_t RowOf(const TensorPiece& p, int64_t r) { return p.row_map ? p.row_map(r) : r; }

// Rows [begin, end) of `local_rows` that replica i of n writes.
std::pair<int64_t, int64_t> ReplicaRows(int64_t rows, int i, int n) {
  const int64_t per = (rows + n - 1) / n;
  const int64_t b = std::min<int64_t>(rows, i * per);
  return {b, std::min<int64_t>(rows, b + per)};
}

void AppendRuns(const TensorPiece& p, int64_t begin, int64_t end, proto::Piece* out) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t g = RowOf(p, r);
    const int n = out->runs_size();
    if (n > 0) {
      proto::RowRun* last = out->mutable_runs(n - 1);
      if (last->global_row() + last->rows() == g) {
        last->set_rows(last->rows() + 1);
        continue;
      }
    }
    proto::RowRun* run = out->add_runs();
    run->set_global_row(g);
    run->set_rows(1);
  }
}

absl::StatusOr<DType> DTypeFromName(const std::string& s) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2,
                  DType::kI32, DType::kI64, DType::kU8}) {
    if (s == DTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", s));
}

// Gathers variable-length byte strings from every rank to every rank.
absl::StatusOr<std::vector<std::string>> AllGatherBytes(comm::Communicator& world,
                                                        const std::string& mine) {
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(world.size());
  GTP_RETURN_IF_ERROR(comm::Run(world.AllGather(&len, lens.data(), 1, DType::kI64)));
  const int64_t max = *std::max_element(lens.begin(), lens.end());
  std::string padded = mine;
  padded.resize(max);
  std::string all(max * world.size(), '\0');
  GTP_RETURN_IF_ERROR(comm::Run(world.AllGather(padded.data(), all.data(), max, DType::kU8)));
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) out.push_back(all.substr(r * max, lens[r]));
  return out;
}

// The first error on any rank becomes every rank's error, so nobody waits
// forever at the next collective.
absl::Status AgreeOnStatus(comm::Communicator& world, const absl::Status& mine,
                           const std::string& what) {
  int32_t bad = mine.ok() ? 0 : 1, any = 0;
  GTP_RETURN_IF_ERROR(comm::Run(world.AllReduce(&bad, &any, 1, DType::kI32, comm::ReduceOp::kMax)));
  if (!mine.ok()) return mine;
  if (any) return absl::AbortedError(absl::StrCat(what, " failed on another rank"));
  return absl::OkStatus();
}

}  // namespace

std::string IterationDir(const std::string& root, int64_t iteration) {
  return absl::StrFormat("%s/iter_%07d", root, iteration);
}

absl::Status CheckNotSpecialFile(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st) || fs::is_regular_file(st)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      path, fs::is_directory(st) ? " is a directory" : " is not a regular file (a FIFO or a device)",
      ", where a checkpoint file should be"));
}

absl::StatusOr<int64_t> LatestIteration(const std::string& root) {
  GTP_RETURN_IF_ERROR(CheckNotSpecialFile(root + "/latest"));
  GTP_RETURN_IF_ERROR(CheckNotSpecialFile(root + "/latest.tmp"));
  std::ifstream in(root + "/latest");
  if (!in) {
    // A save killed after publishing its directory but before renaming
    // latest.tmp over latest: the directory is complete (renamed from
    // iter_N.tmp after its metadata) and latest.tmp, fsynced before the
    // rename, names it. Resume from it (read-only: other ranks may be
    // looking too; the next save rewrites latest).
    std::ifstream t(root + "/latest.tmp");
    const std::string text((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
    int64_t pending = -1;
    if (text.size() > 1 && text.back() == '\n' &&
        absl::SimpleAtoi(absl::string_view(text).substr(0, text.size() - 1), &pending) &&
        pending >= 0 && fs::exists(IterationDir(root, pending) + "/metadata.pb")) {
      return pending;
    }
    // No 'latest' next to finished iteration directories is damage, not a
    // fresh start: starting over would let retention delete them.
    std::vector<std::string> iters;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("iter_", 0) == 0 && name.find('.') == std::string::npos) {
        iters.push_back(name);
      }
    }
    if (iters.empty()) {
      return absl::NotFoundError(absl::StrCat("no checkpoint in ", root, " (no 'latest')"));
    }
    std::sort(iters.begin(), iters.end());
    return absl::DataLossError(absl::StrCat(
        root, " holds checkpoints (", absl::StrJoin(iters, ", "),
        ") but no 'latest' file naming the one to resume: write the iteration number into ", root,
        "/latest, or start over with checkpoint.no_resume=true"));
  }
  // The whole file is the number (whitespace around it allowed): "2abc" used to
  // resume from 2 and "0x2" from 0.
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int64_t it = -1;
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  const bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                         [](char c) { return c >= '0' && c <= '9'; });
  if (!all_digits || !absl::SimpleAtoi(digits, &it) || it < 0) {
    return absl::DataLossError(absl::StrCat(
        root, "/latest is unreadable (it must hold an iteration number, e.g. 100 for iter_0000100): "
              "fix it, or start over with checkpoint.no_resume=true"));
  }
  return it;
}

absl::StatusOr<int64_t> ExtraCount(const std::map<std::string, std::string>& extra,
                                   const std::string& key, const std::string& dir) {
  auto it = extra.find(key);
  if (it == extra.end()) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.pb has no ", key,
                                            ": not this job's checkpoint, or a damaged one "
                                            "(resume from an earlier iteration)"));
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < 0) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.pb: ", key, " is '", it->second,
                                            "', not a whole number >= 0 (the metadata is "
                                            "damaged: resume from an earlier iteration)"));
  }
  return v;
}

// ---- Save --------------------------------------------------------------------------

namespace {
// metadata.pb = serialised proto::Metadata, then an 8-byte trailer: CRC-32
// of the proto bytes (little endian) and the magic "GTPM".
constexpr char kMetaMagic[4] = {'G', 'T', 'P', 'M'};

void AppendMetadataTrailer(std::string* bytes) {
  const uint32_t crc = static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(bytes->data()), bytes->size()));
  for (int i = 0; i < 4; ++i) bytes->push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  bytes->append(kMetaMagic, 4);
}

absl::Status CheckMetadataTrailer(const std::string& path, std::string* bytes) {
  if (bytes->size() < 8 || bytes->compare(bytes->size() - 4, 4, kMetaMagic, 4) != 0) {
    return absl::DataLossError(absl::StrCat(path, " is corrupted (no checksum trailer)"));
  }
  uint32_t want = 0;
  for (int i = 0; i < 4; ++i) {
    want |= static_cast<uint32_t>(static_cast<uint8_t>((*bytes)[bytes->size() - 8 + i])) << (8 * i);
  }
  bytes->resize(bytes->size() - 8);
  const uint32_t got = static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(bytes->data()), bytes->size()));
  if (got != want) {
    return absl::DataLossError(absl::StrCat(path, " is corrupted (checksum ", got, ", stored ", want, ")"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Save(const std::string& root, const std::vector<TensorPiece>& pieces,
                  comm::Communicator& world, const SaveOptions& options) {
  const std::string final_dir = IterationDir(root, options.iteration);
  const std::string tmp_dir = final_dir + ".tmp";
  absl::Status st;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    fs::remove_all(tmp_dir, ec);  // a crashed earlier attempt
    if (!fs::create_directories(tmp_dir, ec)) {
      st = absl::PermissionDeniedError(absl::StrCat("cannot create ", tmp_dir, ": ", ec.message()));
    }
  }
  GTP_RETURN_IF_ERROR(AgreeOnStatus(world, st, "creating " + tmp_dir));

  // Write this rank's file.
  const std::string file = absl::StrFormat("rank_%05d.bin", world.rank());
  const std::string path = tmp_dir + "/" + file;
  proto::Metadata mine;
  st = [&]() -> absl::Status {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return Errno("create " + path);
    char header[kHeaderBytes] = {};
    std::memcpy(header, kMagic, 8);
    std::memcpy(header + 8, &kFormatVersion, 4);
    out.write(header, kHeaderBytes);
    int64_t offset = kHeaderBytes;
    HeapAllocator host;
    for (const TensorPiece& p : pieces) {
      auto [rb, re] = ReplicaRows(p.data.dim(0), p.replica_index, p.replica_count);
      proto::TensorEntry* e = mine.add_tensors();
      e->set_key(p.key);
      e->set_dtype(DTypeName(p.data.dtype()));
      for (int64_t d : p.global_shape) e->add_global_shape(d);
      if (rb >= re) continue;
      Tensor h = p.data;  // host data is written as is; device data is staged once
      if (!h.device().is_cpu() || !h.is_contiguous()) {
        GTP_ASSIGN_OR_RETURN(h, CopyTo(p.data, host));
      }
      const int64_t cols = Cols(p);
      const size_t es = SizeOf(p.data.dtype());
      const char* bytes = static_cast<const char*>(h.raw_data()) + rb * cols * es;
      const int64_t n = (re - rb) * cols * static_cast<int64_t>(es);
      proto::Piece* pc = e->add_pieces();
      AppendRuns(p, rb, re, pc);
      pc->set_col_offset(p.col_offset);
      pc->set_cols(cols);
      pc->set_file(file);
      pc->set_offset(offset);
      pc->set_bytes(n);
      pc->set_crc32(static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(bytes), n)));
      pc->set_writer_rank(world.rank());
      if (options.testing_crash_after_bytes >= 0 && offset + n > options.testing_crash_after_bytes) {
        out.write(bytes, std::max<int64_t>(0, options.testing_crash_after_bytes - offset));
        out.flush();
        std::_Exit(3);  // a saver killed mid-write
      }
      out.write(bytes, n);
      offset += n;
    }
    out.close();
    if (!out) return Errno("write " + path);
    return FsyncPath(path);
  }();
  GTP_RETURN_IF_ERROR(AgreeOnStatus(world, st, "writing checkpoint data"));

  // Merge every rank's entries on rank 0 and commit.
  std::string bytes;
  mine.SerializeToString(&bytes);
  GTP_ASSIGN_OR_RETURN(std::vector<std::string> all, AllGatherBytes(world, bytes));
  st = absl::OkStatus();
  if (world.rank() == 0) {
    st = [&]() -> absl::Status {
      proto::Metadata meta;
      meta.set_format_version(kFormatVersion);
      meta.set_iteration(options.iteration);
      meta.set_world_size(world.size());
      for (const auto& [k, v] : options.extra) (*meta.mutable_extra())[k] = v;
      std::map<std::string, proto::TensorEntry*> by_key;
      for (const std::string& s : all) {
        proto::Metadata m;
        if (!m.ParseFromString(s)) return absl::InternalError("bad metadata from a rank");
        for (const proto::TensorEntry& e : m.tensors()) {
          auto it = by_key.find(e.key());
          if (it == by_key.end()) {
            proto::TensorEntry* ne = meta.add_tensors();
            *ne = e;
            by_key[e.key()] = ne;
            continue;
          }
          if (it->second->dtype() != e.dtype() ||
              !std::equal(e.global_shape().begin(), e.global_shape().end(),
                          it->second->global_shape().begin(), it->second->global_shape().end())) {
            return absl::InvalidArgumentError(
                absl::StrCat("ranks disagree on the dtype or shape of ", e.key()));
          }
          for (const proto::Piece& p : e.pieces()) *it->second->add_pieces() = p;
        }
      }
      std::string out;
      meta.SerializeToString(&out);
      AppendMetadataTrailer(&out);
      GTP_RETURN_IF_ERROR(WriteFileAtomic(tmp_dir + "/metadata.pb", out));
      GTP_RETURN_IF_ERROR(FsyncPath(tmp_dir));
      // latest.tmp names the iteration before its directory is published:
      // a kill at any point leaves `latest` naming the previous checkpoint,
      // or latest.tmp naming this complete one (LatestIteration resumes from
      // it). Written after the publication, a first save killed in between
      // left a complete directory and no way to resume from it.
      GTP_RETURN_IF_ERROR(WriteTmpFsynced(root + "/latest", absl::StrCat(options.iteration, "\n")));
      std::error_code ec;
      fs::remove_all(final_dir, ec);
      fs::rename(tmp_dir, final_dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("rename ", tmp_dir, ": ", ec.message()));
      GTP_RETURN_IF_ERROR(FsyncPath(root));
      const std::string latest_tmp = root + "/latest.tmp", latest = root + "/latest";
      if (std::rename(latest_tmp.c_str(), latest.c_str()) != 0) return Errno("rename " + latest_tmp);
      GTP_RETURN_IF_ERROR(FsyncPath(root));
      if (options.keep_last > 0) {
        std::vector<std::string> iters;
        for (const auto& d : fs::directory_iterator(root, ec)) {
          const std::string n = d.path().filename().string();
          if (n.rfind("iter_", 0) == 0 && n.find(".tmp") == std::string::npos) iters.push_back(n);
        }
        std::sort(iters.begin(), iters.end());
        for (size_t i = 0; i + options.keep_last < iters.size(); ++i)
          fs::remove_all(root + "/" + iters[i], ec);
      }
      return absl::OkStatus();
    }();
  }
  return AgreeOnStatus(world, st, "committing the checkpoint");
}

// ---- Load --------------------------------------------------------------------------

namespace {

// What the readers rely on, checked once: shapes the Shape class accepts,
// pieces inside their tensor, and each piece's byte count equal to its rows
// × cols × element size, so assembling never reads or writes out of bounds
// (tools/fuzz/checkpoint_data_fuzzer found a piece with fewer bytes than
// rows × cols). A metadata.pb whose CRC matches can still say this if it was
// written wrong or crafted.
absl::Status CheckMetadataGeometry(const std::string& path, const proto::Metadata& meta) {
  constexpr int64_t kMaxBytes = int64_t{1} << 50;  // bounds every product below
  for (const proto::TensorEntry& e : meta.tensors()) {
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(path, " is inconsistent: tensor ", e.key(), " ", why));
    };
    absl::StatusOr<DType> dtype = DTypeFromName(e.dtype());
    if (!dtype.ok()) return bad(std::string(dtype.status().message()));
    const int64_t es = static_cast<int64_t>(SizeOf(*dtype));
    if (e.global_shape_size() < 1 || e.global_shape_size() > 2) {
      return bad(absl::StrCat("has ", e.global_shape_size(), " dims (1 or 2 expected)"));
    }
    const int64_t rows = e.global_shape(0), cols = e.global_shape_size() == 2 ? e.global_shape(1) : 1;
    if (rows < 0 || cols < 0 || rows > kMaxBytes || cols > kMaxBytes ||
        (cols > 0 && rows > kMaxBytes / es / cols)) {
      return bad(absl::StrCat("has an impossible shape [", absl::StrJoin(e.global_shape(), ", "), "]"));
    }
    int64_t total = 0;
    for (const proto::Piece& p : e.pieces()) {
      if (p.col_offset() < 0 || p.cols() < (cols > 0 ? 1 : 0) || p.col_offset() > cols ||
          p.cols() > cols - p.col_offset()) {
        return bad(absl::StrCat("has a piece of columns [", p.col_offset(), ", +", p.cols(),
                                ") outside its ", cols));
      }
      int64_t piece_rows = 0;
      for (const proto::RowRun& run : p.runs()) {
        if (run.global_row() < 0 || run.rows() < 0 || run.global_row() > rows ||
            run.rows() > rows - run.global_row()) {
          return bad(absl::StrCat("has a piece of rows [", run.global_row(), ", +", run.rows(),
                                  ") outside its ", rows));
        }
        piece_rows += run.rows();
        if (piece_rows > rows) return bad("has a piece with more rows than the tensor");
      }
      if (p.offset() < 0 || p.bytes() != piece_rows * p.cols() * es) {
        return bad(absl::StrCat("has a piece of ", piece_rows, " × ", p.cols(), " elements in ",
                                p.bytes(), " bytes at offset ", p.offset()));
      }
      if (p.file().empty() || p.file().find('/') != std::string::npos || p.file() == "." ||
          p.file() == "..") {
        return bad(absl::StrCat("names the data file \"", p.file(), "\" (a file name expected)"));
      }
      total += p.bytes();
      if (total > kMaxBytes) return bad("has pieces of more than 2^50 bytes");
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<proto::Metadata> ReadCheckpointMetadata(const std::string& dir) {
  const std::string path = dir + "/metadata.pb";
  GTP_RETURN_IF_ERROR(CheckNotSpecialFile(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The trailer's CRC-32 covers the serialised metadata: a flipped byte is
  // named here, never parsed into a plausible but wrong checkpoint.
  GTP_RETURN_IF_ERROR(CheckMetadataTrailer(path, &bytes));
  proto::Metadata meta;
  if (!meta.ParseFromString(bytes)) return absl::DataLossError(absl::StrCat(path, " is corrupted"));
  if (meta.format_version() > kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(path, " has format version ",
                                                      meta.format_version(), "; this build reads ",
                                                      kFormatVersion));
  }
  GTP_RETURN_IF_ERROR(CheckMetadataGeometry(path, meta));
  return meta;
}

namespace {
absl::StatusOr<proto::Metadata> ReadMetadata(const std::string& dir) {
  return ReadCheckpointMetadata(dir);
}

// Reads and verifies saved pieces, caching each piece's bytes.
class PieceReader {
 public:
  explicit PieceReader(std::string dir) : dir_(std::move(dir)) {}

  absl::StatusOr<const std::string*> Get(const std::string& key, const proto::Piece& p) {
    const std::string id = absl::StrCat(p.file(), ":", p.offset());
    auto it = cache_.find(id);
    if (it != cache_.end()) return &it->second;
    const std::string path = dir_ + "/" + p.file();
    GTP_RETURN_IF_ERROR(CheckRange(key, p));
    GTP_RETURN_IF_ERROR(CheckNotSpecialFile(path));
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::DataLossError(absl::StrCat("cannot open ", path, " (tensor ", key, ")"));
    std::string buf(p.bytes(), '\0');
    in.seekg(p.offset());
    in.read(buf.data(), p.bytes());
    if (in.gcount() != p.bytes()) {
      return absl::DataLossError(absl::StrCat(path, " is truncated: tensor ", key, " needs bytes [",
                                              p.offset(), ", ", p.offset() + p.bytes(), ")"));
    }
    const uint32_t crc = static_cast<uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(buf.data()), buf.size()));
    if (crc != p.crc32()) {
      return absl::DataLossError(absl::StrCat("checksum mismatch in ", path, " for tensor ", key,
                                              " (bytes [", p.offset(), ", ",
                                              p.offset() + p.bytes(), "))"));
    }
    return &cache_.emplace(id, std::move(buf)).first->second;
  }

  // The piece lies in its file (checked before its bytes are allocated: a
  // piece's size comes from the metadata, not from the file).
  absl::Status CheckRange(const std::string& key, const proto::Piece& p) {
    const std::string path = dir_ + "/" + p.file();
    GTP_RETURN_IF_ERROR(CheckHeader(path));
    const int64_t size = checked_[path];
    if (p.offset() < static_cast<int64_t>(kHeaderBytes) || p.offset() > size ||
        p.bytes() > size - p.offset()) {
      return absl::DataLossError(absl::StrCat(path, " is truncated: tensor ", key, " needs bytes [",
                                              p.offset(), ", ", p.offset() + p.bytes(), ")"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status CheckHeader(const std::string& path) {
    if (checked_.count(path)) return absl::OkStatus();
    GTP_RETURN_IF_ERROR(CheckNotSpecialFile(path));
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::error_code ec;
      return absl::DataLossError(absl::StrCat(
          path, fs::exists(path, ec) ? " cannot be read" : " is missing",
          " (the checkpoint's metadata lists it: the checkpoint is incomplete)"));
    }
    char h[kHeaderBytes] = {};
    in.read(h, kHeaderBytes);
    if (!in || std::memcmp(h, kMagic, 8) != 0) {
      return absl::DataLossError(absl::StrCat(path, " is not a gtp checkpoint data file"));
    }
    uint32_t v = 0;
    std::memcpy(&v, h + 8, 4);
    if (v > kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(path, " has format version ", v));
    }
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) return absl::DataLossError(absl::StrCat(path, " cannot be read"));
    checked_.insert({path, static_cast<int64_t>(size)});
    return absl::OkStatus();
  }
  std::string dir_;
  std::map<std::string, std::string> cache_;
  std::map<std::string, int64_t> checked_;  // file → size, header verified
};

// Copies every element of `dst_piece` (host staging `out`) from the saved pieces.
absl::Status Assemble(const proto::TensorEntry& e, const TensorPiece& want, PieceReader& reader,
                      char* out) {
  const size_t es = SizeOf(want.data.dtype());
  const int64_t rows = want.data.dim(0), cols = Cols(want);
  const int64_t c0 = want.col_offset, c1 = c0 + cols;
  // global row → (piece index, row within piece) for pieces overlapping our columns.
  std::map<int64_t, std::vector<std::pair<int, int64_t>>> where;
  for (int i = 0; i < e.pieces_size(); ++i) {
    const proto::Piece& p = e.pieces(i);
    if (p.col_offset() >= c1 || p.col_offset() + p.cols() <= c0) continue;
    int64_t k = 0;
    for (const proto::RowRun& run : p.runs())
      for (int64_t j = 0; j < run.rows(); ++j) where[run.global_row() + j].push_back({i, k++});
  }
  std::vector<uint8_t> covered(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = RowOf(want, r);
    std::fill(covered.begin(), covered.end(), 0);
    auto it = where.find(g);
    if (it != where.end()) {
      for (const auto& [pi, pr] : it->second) {
        const proto::Piece& p = e.pieces(pi);
        GTP_ASSIGN_OR_RETURN(const std::string* bytes, reader.Get(e.key(), p));
        const int64_t lo = std::max(c0, p.col_offset()), hi = std::min(c1, p.col_offset() + p.cols());
        std::memcpy(out + (r * cols + (lo - c0)) * es,
                    bytes->data() + (pr * p.cols() + (lo - p.col_offset())) * es, (hi - lo) * es);
        std::fill(covered.begin() + (lo - c0), covered.begin() + (hi - c0), 1);
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (!covered[c]) {
        return absl::DataLossError(absl::StrCat("checkpoint has no data for ", e.key(), "[", g,
                                                ", ", c0 + c, "]"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadResult> Load(const std::string& root, std::optional<int64_t> iteration,
                                const std::vector<TensorPiece>& pieces, comm::Communicator& world) {
  absl::StatusOr<LoadResult> result = [&]() -> absl::StatusOr<LoadResult> {
    int64_t it = 0;
    if (iteration) {
      it = *iteration;
    } else {
      GTP_ASSIGN_OR_RETURN(it, LatestIteration(root));
    }
    const std::string dir = IterationDir(root, it);
    GTP_ASSIGN_OR_RETURN(proto::Metadata meta, ReadMetadata(dir));
    std::map<std::string, const proto::TensorEntry*> by_key;
    for (const proto::TensorEntry& e : meta.tensors()) by_key[e.key()] = &e;
    PieceReader reader(dir);
    HeapAllocator host;
    std::vector<Tensor> staged;
    for (const TensorPiece& p : pieces) {
      auto f = by_key.find(p.key);
      if (f == by_key.end()) {
        return absl::NotFoundError(absl::StrCat("tensor ", p.key, " is not in ", dir));
      }
      const proto::TensorEntry& e = *f->second;
      GTP_ASSIGN_OR_RETURN(DType saved, DTypeFromName(e.dtype()));
      std::vector<int64_t> gshape(e.global_shape().begin(), e.global_shape().end());
      if (saved != p.data.dtype() || Shape(gshape) != p.global_shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", p.key, " is ", e.dtype(), Shape(gshape).ToString(), " in ", dir,
            ", the model expects ", DTypeName(p.data.dtype()), p.global_shape.ToString()));
      }
      Tensor h = Tensor::Empty(p.data.shape(), p.data.dtype(), host);
      GTP_RETURN_IF_ERROR(Assemble(e, p, reader, static_cast<char*>(h.raw_data())));
      staged.push_back(h);
    }
    // Everything read and verified: only now touch the model.
    for (size_t i = 0; i < pieces.size(); ++i) GTP_RETURN_IF_ERROR(Copy(staged[i], pieces[i].data));
    LoadResult r;
    r.iteration = meta.iteration();
    for (const auto& [k, v] : meta.extra()) r.extra[k] = v;
    return r;
  }();
  GTP_RETURN_IF_ERROR(AgreeOnStatus(world, result.status(), "loading the checkpoint"));
  return result;
}

absl::StatusOr<std::vector<GlobalTensor>> ReadAllGlobal(const std::string& dir) {
  GTP_ASSIGN_OR_RETURN(proto::Metadata meta, ReadMetadata(dir));
  PieceReader reader(dir);
  std::vector<GlobalTensor> out;
  for (const proto::TensorEntry& e : meta.tensors()) {
    GlobalTensor g;
    g.key = e.key();
    GTP_ASSIGN_OR_RETURN(g.dtype, DTypeFromName(e.dtype()));
    std::vector<int64_t> shape(e.global_shape().begin(), e.global_shape().end());
    g.shape = Shape(shape);
    // Sizes from the metadata: allocate only what the files can hold.
    int64_t stored = 0;
    for (const proto::Piece& p : e.pieces()) {
      GTP_RETURN_IF_ERROR(reader.CheckRange(e.key(), p));
      stored += p.bytes();
    }
    if (stored < g.shape.numel() * static_cast<int64_t>(SizeOf(g.dtype))) {
      return absl::DataLossError(absl::StrCat("checkpoint has no data for all of ", e.key(), " (",
                                              stored, " bytes stored for ", g.shape.ToString(), ")"));
    }
    g.bytes.resize(g.shape.numel() * SizeOf(g.dtype));
    TensorPiece whole;
    whole.key = e.key();
    whole.global_shape = g.shape;
    whole.data = Tensor::Wrap(g.bytes.data(),
                              g.shape.rank() >= 2 ? Shape{g.shape[0], g.shape[1]} : Shape{g.shape[0]},
                              g.dtype, Device::Cpu());
    GTP_RETURN_IF_ERROR(Assemble(e, whole, reader, reinterpret_cast<char*>(g.bytes.data())));
    out.push_back(std::move(g));
  }
  return out;
}

// ---- AsyncSaver ----------------------------------------------------------------------

AsyncSaver::~AsyncSaver() { (void)Wait(); }

absl::Status AsyncSaver::Wait() {
  if (!thread_.joinable()) return absl::OkStatus();
  thread_.join();
  absl::Status st = result_;
  result_ = absl::OkStatus();
  host_.reset();
  return st;
}

absl::Status AsyncSaver::Start(const std::string& root, const std::vector<TensorPiece>& pieces,
                               const SaveOptions& options) {
  GTP_RETURN_IF_ERROR(Wait());
  host_ = std::make_unique<HeapAllocator>();
  std::vector<TensorPiece> copies;
  copies.reserve(pieces.size());
  for (const TensorPiece& p : pieces) {
    TensorPiece c = p;
    GTP_ASSIGN_OR_RETURN(c.data, CopyTo(p.data, *host_));  // synchronous snapshot
    copies.push_back(std::move(c));
  }
  thread_ = std::thread([this, root, options, copies = std::move(copies)]() {
    result_ = Save(root, copies, comm_, options);
  });
  return absl::OkStatus();
}

}  // namespace gtp::checkpoint
