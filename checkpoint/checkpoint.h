// checkpoint/checkpoint.h — sharded, resharding, atomic distributed
// checkpoints (DESIGN.md §6).
//
// A checkpoint is a directory <root>/iter_0000042/ holding
//   metadata.pb       every tensor's key, dtype, global shape and saved pieces
//                     (row runs × column range, file, byte range, CRC-32)
//   rank_00003.bin    the bytes written by rank 3 ("GTPCKPT" magic + format
//                     version header, then raw row-major pieces)
// and <root>/latest naming the newest complete iteration.
//
// Every rank describes what it holds as TensorPieces: a [local_rows, cols]
// block of a global [R, C] (or [R]) tensor whose local row r is global row
// row_map(r) and whose columns start at col_offset. Ranks holding the same
// piece (replicas: DP copies, GTP copies of replicated params) split its rows
// for writing (replica_index of replica_count), so N replicas each write
// about 1/N of it and every element is written exactly once.
//
// Save: each rank writes its file into <root>/iter_N.tmp/, fsyncs it, the
// metadata goes to rank 0 which writes metadata.pb, writes and fsyncs
// latest.tmp naming N, renames the directory to iter_N, then renames
// latest.tmp over `latest`. A crash at any point leaves `latest` on the
// previous complete checkpoint, or (no `latest` yet, or killed between the
// two renames) latest.tmp naming the complete iter_N, which LatestIteration
// resumes from.
//
// Load: each rank reads metadata.pb and pulls exactly the elements its own
// pieces need from whichever files hold them — so any layout loads any
// other (TP, GTP, DP, padding changes). Every byte read is covered by a
// CRC-32 check; a torn, truncated or corrupted file, a missing tensor, a
// shape or dtype mismatch is an error naming the tensor and the file, and
// nothing is written into the destination tensors before everything needed
// was read and verified.
//
// Save and Load are collective over `world` and block.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/metadata.pb.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace gtp::checkpoint {

inline constexpr uint32_t kFormatVersion = 1;

struct TensorPiece {
  std::string key;
  // [local_rows, cols] or [local_rows] (cols = 1); any device; contiguous.
  Tensor data;
  // [R] or [R, C].
  Shape global_shape;
  // Local row → global row (nullptr: identity).
  std::function<int64_t(int64_t)> row_map;
  int64_t col_offset = 0;
  // Replicas of this exact piece split its rows for writing.
  int replica_index = 0;
  int replica_count = 1;
};

struct SaveOptions {
  int64_t iteration = 0;
  // Free-form state stored in the metadata (config, layout, RNG, data position...).
  std::map<std::string, std::string> extra;
  // Keep only the newest `keep_last` complete checkpoints (0: keep all).
  int keep_last = 0;
  // Test hook: when >= 0, the process exits abruptly (std::_Exit) after
  // writing this many bytes of its data file, as a killed saver would.
  int64_t testing_crash_after_bytes = -1;
};

// Saves `pieces` (this rank's) under `root`. Collective over `world`; blocks.
absl::Status Save(const std::string& root, const std::vector<TensorPiece>& pieces,
                  comm::Communicator& world, const SaveOptions& options);

struct LoadResult {
  int64_t iteration = 0;
  std::map<std::string, std::string> extra;
};

// Fills every piece in `pieces` (this rank's, in the current layout) from the
// checkpoint of `iteration` (nullopt: the one `latest` names). Collective
// over `world` (a barrier at the end); blocks. NotFound when there is no
// checkpoint; DataLoss / InvalidArgument as described above.
absl::StatusOr<LoadResult> Load(const std::string& root, std::optional<int64_t> iteration,
                                const std::vector<TensorPiece>& pieces, comm::Communicator& world);

// The iteration `latest` names; NotFound when the root holds no checkpoint;
// DataLoss (naming the fix) when `latest` is unreadable, or missing next to
// iteration directories. Does not block on other ranks.
absl::StatusOr<int64_t> LatestIteration(const std::string& root);

// A whole number >= 0 that a job stored in a checkpoint's `extra` entries
// (e.g. "optimizer_step"): DataLoss naming <dir>/metadata.pb, the key and
// the value when it is missing or not such a number.
absl::StatusOr<int64_t> ExtraCount(const std::map<std::string, std::string>& extra,
                                   const std::string& key, const std::string& dir);

// Asynchronous save: Start copies this rank's pieces to host memory (the
// only blocking part; training may change the tensors as soon as it
// returns) and writes and commits them on a background thread, over `comm`.
// `comm` must be used by nobody else while a save is in flight: give the
// saver its own communicator (e.g. world.Split of all ranks). Start waits
// for the previous save first; Wait returns its status. Every rank must
// call Start and Wait in the same order. Not thread-safe itself.
class AsyncSaver {
 public:
  explicit AsyncSaver(comm::Communicator& comm) : comm_(comm) {}
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  absl::Status Start(const std::string& root, const std::vector<TensorPiece>& pieces,
                     const SaveOptions& options);
  absl::Status Wait();
  bool in_flight() const { return thread_.joinable(); }

 private:
  comm::Communicator& comm_;
  std::thread thread_;
  absl::Status result_;
  std::unique_ptr<HeapAllocator> host_;
};

// Directory of one iteration: <root>/iter_%07d.
std::string IterationDir(const std::string& root, int64_t iteration);

// The metadata of one iteration directory (…/iter_0000010), its checksum
// verified: DataLoss naming the file when it is damaged. metadata.pb is the
// serialised proto::Metadata followed by its CRC-32 and the magic "GTPM".
absl::StatusOr<proto::Metadata> ReadCheckpointMetadata(const std::string& iteration_dir);

// OK when `path` is missing or a regular file; InvalidArgument naming it
// otherwise (a directory, or a FIFO or device, whose open would block).
// Readers of checkpoint files call it before opening one.
absl::Status CheckNotSpecialFile(const std::string& path);

// Reads and assembles the full global tensor `key` (host, f32 or its saved
// dtype as raw bytes) from a checkpoint directory, without any model: for
// tools (inspect, export). Verifies checksums.
struct GlobalTensor {
  std::string key;
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};
absl::StatusOr<std::vector<GlobalTensor>> ReadAllGlobal(const std::string& iteration_dir);

}  // namespace gtp::checkpoint
