// recipes/trainer/tensorboard/event_writer.h — TensorBoard scalar event files
// ("tfevents"), written without TensorFlow or its protos.
//
//   GTP_ASSIGN_OR_RETURN(EventWriter w, EventWriter::Open(run_dir + "/tensorboard"));
//   GTP_RETURN_IF_ERROR(w.WriteScalars(step, {{"train/loss", 2.31f}, {"train/lr", 3e-3f}}));
//   GTP_RETURN_IF_ERROR(w.Close());      // or let the destructor close it
//
// File: <dir>/events.out.tfevents.<unix seconds>.<hostname>, a new one per
// Open (".1", ".2", … appended if that name exists), so a resumed run adds a
// file beside the old ones and TensorBoard merges them. It is a sequence of
// TFRecords:
//   uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
//   payload (length bytes)        | uint32 masked CRC-32C of the payload
// each payload one serialized tensorflow.Event (tensorflow/core/util/event.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//             SummaryMetadata metadata = 9; }
// A text value (TensorBoard's text plugin, shown as markdown) is a scalar
// string tensor with metadata plugin_name "text":
//   SummaryMetadata { PluginData plugin_data = 1; }  PluginData { string plugin_name = 1; }
//   TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2 (no
//                 dims: a scalar); repeated bytes string_val = 8; }
// The first record carries file_version "brain.Event:2"; then one Event per
// WriteScalars, with one Value per scalar. The wire format is encoded here by
// hand (a few tags, varints and length prefixes): the repo's protobuf would
// need a copy of TensorFlow's .proto files and a codegen step for three
// messages, and the bytes are easier to pin down in a test this way.
//
// Functions returning Status: Open, WriteScalars, WriteText, Close (errors name the file).
// Not thread-safe: one writer per thread (the trainer writes from rank 0).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gtp::recipes::tensorboard {

// One TensorBoard scalar: `tag` names the chart ("train/loss"; the part
// before '/' groups charts).
struct Scalar {
  std::string tag;
  float value = 0;
};

// The file_version Event TensorBoard expects first. Pure.
std::string EncodeFileVersionEvent(double wall_time);

// One Event at `step` whose summary holds `scalars` in order. Pure.
std::string EncodeScalarEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

// One Event at `step` whose summary holds `text` as TensorBoard's text
// plugin shows it (markdown), under `tag`. Pure.
std::string EncodeTextEvent(double wall_time, int64_t step, std::string_view tag,
                            std::string_view text);

// `payload` framed as one TFRecord (length, masked CRCs). Pure.
std::string EncodeRecord(std::string_view payload);

class EventWriter {
 public:
  // Creates `dir` (and its parents) if missing and a new event file in it
  // holding the file_version record, flushed. Blocks on the file system.
  static absl::StatusOr<EventWriter> Open(const std::string& dir);

  EventWriter(EventWriter&&) = default;
  EventWriter& operator=(EventWriter&&) = default;
  ~EventWriter();  // closes; errors are lost (call Close to see them)

  // Appends one Event at `step` (wall time: now) with `scalars` and flushes
  // it to the OS, so a running TensorBoard sees the step. Blocks on the write.
  absl::Status WriteScalars(int64_t step, const std::vector<Scalar>& scalars);
  // One text value (EncodeTextEvent), flushed.
  absl::Status WriteText(int64_t step, std::string_view tag, std::string_view text);

  // Flushes and closes the file; later writes fail. Idempotent.
  absl::Status Close();

  // The event file's path.
  const std::string& path() const { return path_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  EventWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Append(const std::string& payload);

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

}  // namespace gtp::recipes::tensorboard
