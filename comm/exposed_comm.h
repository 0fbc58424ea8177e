// comm/exposed_comm.h — how long communication kept the training thread (or,
// on CUDA, the compute stream) waiting: the part of it not hidden behind
// compute ("exposed").
//
// One ExposedComm per owner of collectives (a GtpChain's gathers and
// reduce-scatters, an optimizer's gradient buffers); the trainer reads and
// resets them once per step. Usage:
//
//   comm::ExposedComm exposed;
//   exposed.set_stream(compute_stream);   // CUDA only
//   GTP_RETURN_IF_ERROR(exposed.Wait(*work, timeline, "gather", name));
//   ... after the step's synchronisation:
//   double ms = exposed.ms();
//   exposed.Reset();
//
// Wait returns absl::Status (the Work's); nothing else fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/timeline.h"

namespace gtp::comm {

// Communication not hidden behind compute ("exposed"), summed over the
// Waits that had to wait (Test() false). Not thread-safe: the training
// thread records.
//  - Host backends (no stream set): the host time the training thread
//    spent blocked in Wait.
//  - CUDA (set_stream: the compute stream): a Wait only orders the compute
//    stream after the communication and rarely blocks the host, so the
//    stall is measured on the device: an event recorded on the compute
//    stream just before the Wait and one just after; the time between them
//    is how long the stream sat idle for the communication (0 when the
//    compute before the Wait took longer). Resolved when ms() is read
//    (waiting for the second event), e.g. after the step's synchronisation.
//    Not recorded while the stream is being captured into a CUDA graph.
class ExposedComm {
 public:
  ExposedComm() = default;
  ExposedComm(ExposedComm&&) = default;
  ExposedComm& operator=(ExposedComm&&) = default;
  ~ExposedComm();

  void set_stream(cudaStream_t stream) { stream_ = stream; }
  // Waits on `work`. If it has not completed yet, the wait counts (see the
  // class comment) and, with a timeline (a CPU one: spans use the host
  // clock), a span "<what> <param>" is recorded on the "comm" track. Blocks
  // like Wait; returns its status.
  absl::Status Wait(Work& work, Timeline* timeline, const char* what, const std::string& param);
  // Adds a blocking call timed by the caller (e.g. a synchronous collective).
  void Add(double ms) {
    ms_ += ms;
    ++waits_;
  }
  // Milliseconds and number of counted waits since the last Reset (ms()
  // first resolves the device-timed waits: it may block until they ended).
  double ms() const;
  int64_t waits() const { return waits_; }
  void Reset();

 private:
  struct EventPair {
    cudaEvent_t before = nullptr, after = nullptr;
  };
  cudaStream_t stream_ = nullptr;
  mutable double ms_ = 0;
  int64_t waits_ = 0;
  // Device-timed waits not yet resolved, and resolved pairs for reuse.
  mutable std::vector<EventPair> pending_, free_;
};

}  // namespace gtp::comm
