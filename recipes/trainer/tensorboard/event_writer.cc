#include "recipes/trainer/tensorboard/event_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "recipes/trainer/tensorboard/crc32c.h"

namespace gtp::recipes::tensorboard {

namespace {

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(uint32_t field, uint32_t wire_type, std::string* out) {
  PutVarint((field << 3) | wire_type, out);
}

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void PutDouble(uint32_t field, double d, std::string* out) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  PutTag(field, kFixed64, out);
  PutLittleEndian(bits, 8, out);
}

void PutFloat(uint32_t field, float f, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  PutTag(field, kFixed32, out);
  PutLittleEndian(bits, 4, out);
}

void PutBytes(uint32_t field, std::string_view b, std::string* out) {
  PutTag(field, kLengthDelimited, out);
  PutVarint(b.size(), out);
  out->append(b.data(), b.size());
}

// Event fields.
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
// Summary.value, and Value's fields.
constexpr uint32_t kValue = 1, kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
// SummaryMetadata.plugin_data, PluginData.plugin_name; TensorProto's fields.
constexpr uint32_t kPluginData = 1, kPluginName = 1;
constexpr uint32_t kDtype = 1, kTensorShape = 2, kStringVal = 8, kDtString = 7;

std::string EventHeader(double wall_time, int64_t step) {
  std::string e;
  PutDouble(kWallTime, wall_time, &e);
  PutTag(kStep, kVarint, &e);
  PutVarint(static_cast<uint64_t>(step), &e);  // int64: two's complement, as protobuf does
  return e;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

absl::Status WriteError(const std::string& what, const std::string& path, int err) {
  return absl::DataLossError(
      absl::StrCat("tensorboard: cannot ", what, " ", path, ": ", std::strerror(err)));
}

}  // namespace

std::string EncodeFileVersionEvent(double wall_time) {
  std::string e = EventHeader(wall_time, 0);
  PutBytes(kFileVersion, "brain.Event:2", &e);
  return e;
}

std::string EncodeScalarEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    PutBytes(kTag, s.tag, &value);
    PutFloat(kSimpleValue, s.value, &value);
    PutBytes(kValue, value, &summary);
  }
  std::string e = EventHeader(wall_time, step);
  PutBytes(kSummary, summary, &e);
  return e;
}

std::string EncodeTextEvent(double wall_time, int64_t step, std::string_view tag,
                            std::string_view text) {
  std::string plugin, metadata, tensor, value, summary;
  PutBytes(kPluginName, "text", &plugin);
  PutBytes(kPluginData, plugin, &metadata);
  PutTag(kDtype, kVarint, &tensor);
  PutVarint(kDtString, &tensor);
  PutBytes(kTensorShape, "", &tensor);  // no dims: a scalar
  PutBytes(kStringVal, text, &tensor);
  PutBytes(kTag, tag, &value);
  PutBytes(kTensor, tensor, &value);
  PutBytes(kMetadata, metadata, &value);
  PutBytes(kValue, value, &summary);
  std::string e = EventHeader(wall_time, step);
  PutBytes(kSummary, summary, &e);
  return e;
}

std::string EncodeRecord(std::string_view payload) {
  std::string r;
  r.reserve(payload.size() + 16);
  PutLittleEndian(payload.size(), 8, &r);
  PutLittleEndian(MaskedCrc32c(r), 4, &r);
  r.append(payload.data(), payload.size());
  PutLittleEndian(MaskedCrc32c(payload), 4, &r);
  return r;
}

absl::StatusOr<EventWriter> EventWriter::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("tensorboard: cannot create directory ", dir, ": ", ec.message()));
  }
  const double now = Now();
  const std::string base =
      absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", Hostname());
  for (int n = 0;; ++n) {
    std::string path = n == 0 ? base : absl::StrCat(base, ".", n);
    // "x": never clobber an existing file (two opens in one second).
    std::FILE* f = std::fopen(path.c_str(), "wbx");
    if (f == nullptr && errno == EEXIST && n < 1000) continue;
    if (f == nullptr) {
      return absl::PermissionDeniedError(
          absl::StrCat("tensorboard: cannot create ", path, ": ", std::strerror(errno)));
    }
    EventWriter w(std::move(path), f);
    absl::Status st = w.Append(EncodeFileVersionEvent(now));
    if (!st.ok()) return st;
    return std::move(w);
  }
}

EventWriter::~EventWriter() { (void)Close(); }

absl::Status EventWriter::WriteScalars(int64_t step, const std::vector<Scalar>& scalars) {
  return Append(EncodeScalarEvent(Now(), step, scalars));
}

absl::Status EventWriter::WriteText(int64_t step, std::string_view tag, std::string_view text) {
  return Append(EncodeTextEvent(Now(), step, tag, text));
}

absl::Status EventWriter::Append(const std::string& payload) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("tensorboard: ", path_, " is closed"));
  }
  const std::string record = EncodeRecord(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) {
    return WriteError("write", path_, errno);
  }
  if (std::fflush(file_.get()) != 0) return WriteError("write", path_, errno);
  return absl::OkStatus();
}

absl::Status EventWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  std::FILE* f = file_.release();
  if (std::fclose(f) != 0) return WriteError("close", path_, errno);
  return absl::OkStatus();
}

}  // namespace gtp::recipes::tensorboard
