#include "comm/exposed_comm.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::comm {

ExposedComm::~ExposedComm() {
  for (auto* list : {&pending_, &free_}) {
    for (EventPair& e : *list) {
      cudaEventDestroy(e.before);
      cudaEventDestroy(e.after);
    }
  }
}

absl::Status ExposedComm::Wait(Work& work, Timeline* timeline, const char* what,
                               const std::string& param) {
  if (work.Test()) return work.Wait();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (stream_ != nullptr && cudaStreamIsCapturing(stream_, &capture) == cudaSuccess &&
      capture == cudaStreamCaptureStatusNone) {
    EventPair e;
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    } else {
      GTP_CHECK(cudaEventCreate(&e.before) == cudaSuccess &&
                    cudaEventCreate(&e.after) == cudaSuccess,
                "ExposedComm: cudaEventCreate failed");
    }
    cudaEventRecord(e.before, stream_);
    absl::Status st = work.Wait();
    cudaEventRecord(e.after, stream_);
    pending_.push_back(e);
    ++waits_;
    return st;
  }
  std::optional<Timeline::Scope> span;
  if (timeline != nullptr) span.emplace(timeline, absl::StrCat(what, " ", param), nullptr, "comm");
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = work.Wait();
  Add(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return st;
}

double ExposedComm::ms() const {
  for (const EventPair& e : pending_) {
    float ms = 0;
    if (cudaEventSynchronize(e.after) == cudaSuccess &&
        cudaEventElapsedTime(&ms, e.before, e.after) == cudaSuccess) {
      ms_ += ms;
    }
    free_.push_back(e);
  }
  pending_.clear();
  return ms_;
}

void ExposedComm::Reset() {
  ms();  // recycles the pending events
  ms_ = 0;
  waits_ = 0;
}

}  // namespace gtp::comm
