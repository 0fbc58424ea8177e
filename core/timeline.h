// core/timeline.h — a step timeline: named spans on CUDA streams (timed by
// CUDA events, so they show where the device spends its time, not where the
// host enqueued) or on the host clock for CPU runs, written as Chrome-trace
// JSON that chrome://tracing and Perfetto open.
//
//   Timeline tl(/*cuda=*/true);
//   tl.Begin("forward", stream);  ...  tl.End(stream);
//   { Timeline::Scope s(&tl, "h.3.mlp", stream); ... }   // null timeline: no-op
//   GTP_RETURN_IF_ERROR(tl.Collect());     // after the step: waits for its events
//   GTP_RETURN_IF_ERROR(tl.WriteChromeTrace(path));
//
// Spans nest per track; a track is named by the caller ("compute", "comm").
// Not thread-safe: one training thread records.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/cuda_runtime.h"

namespace gtp {

class Timeline {
 public:
  explicit Timeline(bool cuda) : cuda_(cuda) {}
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Opens a span on `stream` (ignored on CPU). Never blocks.
  void Begin(const std::string& name, cudaStream_t stream, const std::string& track = "compute");
  // Closes the innermost open span of `track`. Never blocks.
  void End(cudaStream_t stream, const std::string& track = "compute");
  // Turns the recorded spans into finished events (waits for their CUDA
  // events: call outside the timed region). Blocks.
  absl::Status Collect();
  // Writes every collected span as Chrome-trace JSON ("X" events, µs).
  absl::Status WriteChromeTrace(const std::string& path) const;

  struct Span {
    std::string name, track;
    double begin_us = 0, end_us = 0;
    int depth = 0;
  };
  const std::vector<Span>& spans() const { return done_; }

  // RAII span; a null timeline records nothing.
  class Scope {
   public:
    Scope(Timeline* t, const std::string& name, cudaStream_t stream,
          const std::string& track = "compute")
        : t_(t), stream_(stream), track_(track) {
      if (t_) t_->Begin(name, stream_, track_);
    }
    ~Scope() {
      if (t_) t_->End(stream_, track_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline* t_;
    cudaStream_t stream_;
    std::string track_;
  };

 private:
  struct Open {
    std::string name, track;
    int begin = -1, end = -1;  // indices into events_ (CUDA) / host_us_ (CPU)
    int depth = 0;
  };
  int Mark(cudaStream_t stream);
  double MarkUs(int mark) const;

  bool cuda_;
  std::vector<Open> pending_;      // begun this collection window (closed or not)
  std::vector<int> stack_;         // indices into pending_ of open spans, all tracks
  std::vector<Event> events_;      // CUDA: one per mark, reused across windows
  int used_events_ = 0;
  std::vector<double> host_us_;    // CPU: one per mark
  bool have_origin_ = false;
  Event origin_;                   // CUDA: time zero
  std::chrono::steady_clock::time_point origin_host_;
  double offset_us_ = 0;           // time of this window's origin after the first
  std::vector<Span> done_;
};

}  // namespace gtp
