#include "core/timeline.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace gtp {

int Timeline::Mark(cudaStream_t stream) {
  if (!cuda_) {
    if (!have_origin_) {
      origin_host_ = std::chrono::steady_clock::now();
      have_origin_ = true;
    }
    host_us_.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                                 origin_host_)
                           .count());
    return static_cast<int>(host_us_.size()) - 1;
  }
  if (!have_origin_) {
    auto e = Event::Create(/*timing=*/true);
    GTP_CHECK_OK(e.status());
    origin_ = std::move(*e);
    origin_.Record(stream);
    have_origin_ = true;
  }
  if (used_events_ == static_cast<int>(events_.size())) {
    auto e = Event::Create(/*timing=*/true);
    GTP_CHECK_OK(e.status());
    events_.push_back(std::move(*e));
  }
  events_[used_events_].Record(stream);
  return used_events_++;
}

double Timeline::MarkUs(int mark) const {
  if (!cuda_) return host_us_[mark];
  return 1e3 * Event::ElapsedMs(origin_, events_[mark]);
}

void Timeline::Begin(const std::string& name, cudaStream_t stream, const std::string& track) {
  int depth = 0;
  for (int i : stack_) depth += pending_[i].track == track;
  pending_.push_back(Open{name, track, Mark(stream), -1, depth});
  stack_.push_back(static_cast<int>(pending_.size()) - 1);
}

void Timeline::End(cudaStream_t stream, const std::string& track) {
  for (size_t k = stack_.size(); k-- > 0;) {
    Open& o = pending_[stack_[k]];
    if (o.track != track) continue;
    o.end = Mark(stream);
    stack_.erase(stack_.begin() + static_cast<long>(k));
    return;
  }
  GTP_CHECK(false, "Timeline::End on track ", track, " without an open span");
}

absl::Status Timeline::Collect() {
  if (!stack_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Timeline::Collect with ", stack_.size(), " open spans (first: ",
                     pending_[stack_.front()].name, ")"));
  }
  if (pending_.empty()) return absl::OkStatus();
  if (cuda_) {
    GTP_RETURN_IF_ERROR(events_[used_events_ - 1].Synchronize());
  }
  double last = 0;
  for (const Open& o : pending_) {
    Span s{o.name, o.track, offset_us_ + MarkUs(o.begin), offset_us_ + MarkUs(o.end), o.depth};
    last = std::max(last, s.end_us);
    done_.push_back(std::move(s));
  }
  pending_.clear();
  // Start the next window from a fresh origin (keeps float event times small).
  used_events_ = 0;
  host_us_.clear();
  have_origin_ = false;
  offset_us_ = last;
  return absl::OkStatus();
}

absl::Status Timeline::WriteChromeTrace(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write the trace to ", path));
  std::vector<std::string> tracks;
  f << "{\"traceEvents\": [\n";
  bool first = true;
  for (const Span& s : done_) {
    size_t tid = 0;
    while (tid < tracks.size() && tracks[tid] != s.track) ++tid;
    if (tid == tracks.size()) tracks.push_back(s.track);
    std::string name;
    for (char c : s.name) name += (c == '"' || c == '\\') ? '_' : c;
    f << (first ? "" : ",\n")
      << absl::StrFormat(
             "{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
             name, tid, s.begin_us, s.end_us - s.begin_us);
    first = false;
  }
  for (size_t t = 0; t < tracks.size(); ++t) {
    f << (first ? "" : ",\n")
      << absl::StrFormat(
             "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": "
             "{\"name\": \"%s\"}}",
             t, tracks[t]);
    first = false;
  }
  f << "\n]}\n";
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("writing the trace to ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace gtp
