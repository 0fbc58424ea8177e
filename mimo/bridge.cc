#include "mimo/bridge.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/host_values.h"
#include "core/status.h"

namespace gtp::mimo {
namespace {

using parallel::HyperCommGrid;

// Fixed header that travels before counts and payload (int64 each).
enum HeaderField : int {
  kStatus = 0,  // 0 ok; 1 the sender has no batch to send (it says why)
  kSamples,
  kRows,
  kDType,
  kNDim,
  kParts,  // entries of LaneBatch::parts (broadcast only)
  kDims,   // kDims .. kDims + Shape::kMaxDims: the shape; dim 0 = kRows
  kHeaderLen = kDims + Shape::kMaxDims,
};
using Header = std::array<int64_t, kHeaderLen>;

Header ErrorHeader() {
  Header h{};
  h[kStatus] = 1;
  return h;
}

Header HeaderOf(const Tensor& t, int64_t samples, int64_t parts) {
  Header h{};
  h[kSamples] = samples;
  h[kRows] = t.dim(0);
  h[kDType] = static_cast<int64_t>(t.dtype());
  h[kNDim] = t.rank();
  h[kParts] = parts;
  for (int i = 0; i < t.rank(); ++i) h[kDims + i] = t.dim(i);
  return h;
}

Shape ShapeOf(const Header& h, int64_t rows) {
  std::vector<int64_t> dims(h.begin() + kDims, h.begin() + kDims + h[kNDim]);
  dims[0] = rows;
  return Shape(dims);
}

int64_t RowElems(const Header& h) {
  int64_t n = 1;
  for (int i = 1; i < h[kNDim]; ++i) n *= h[kDims + i];
  return n;
}

// Same dtype and trailing dims.
bool SameRowLayout(const Header& a, const Header& b) {
  if (a[kDType] != b[kDType] || a[kNDim] != b[kNDim]) return false;
  for (int i = 1; i < a[kNDim]; ++i) {
    if (a[kDims + i] != b[kDims + i]) return false;
  }
  return true;
}

int StageOf(const HyperCommGrid& g, int rank) {
  absl::StatusOr<parallel::AxisValues> c = g.dense().Coordinates(rank);
  return c.ok() ? c->pp : -1;
}

// Index of `rank` in `v`, or -1.
int IndexOf(const std::vector<int>& v, int rank) {
  auto it = std::find(v.begin(), v.end(), rank);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// A run of samples [first, first + count) of a batch and their rows.
struct Piece {
  int64_t first_sample = 0, num_samples = 0;
  int64_t first_row = 0, num_rows = 0;
};

// k and whether the route gathers (from lanes >= to lanes) or scatters.
struct Fan {
  bool gather;
  int k;
};
Fan FanOf(int from_lanes, int to_lanes) {
  if (from_lanes >= to_lanes) return {true, from_lanes / to_lanes};
  return {false, to_lanes / from_lanes};
}

bool IsHolder(const HyperCommGrid& g, int stage, int rank) {
  return g.Contains(rank) && StageOf(g, rank) == stage;
}

int LaneOf(const HyperCommGrid& g, int rank) {
  absl::StatusOr<int> lane = g.DataLane(rank);
  return lane.ok() ? *lane : -1;
}

}  // namespace

const char* BridgeModeName(Bridge::Mode mode) {
  switch (mode) {
    case Bridge::Mode::kP2P:
      return "p2p";
    case Bridge::Mode::kNarrow:
      return "narrow";
    case Bridge::Mode::kGather:
      return "gather";
  }
  return "?";
}

Bridge::~Bridge() = default;

absl::StatusOr<Bridge> Bridge::Create(const std::string& name, const HyperCommGrid& source,
                                      const HyperCommGrid& destination, comm::Communicator& world,
                                      Allocator& alloc, const BridgeOptions& options) {
  if (name.empty()) return absl::InvalidArgumentError("a Bridge needs a name");
  auto where = [](const HyperCommGrid& g) {
    return absl::StrCat(g.name(), " [", g.offset(), ", ", g.offset() + g.size(), ")");
  };
  if (source.world_rank() != world.rank() || destination.world_rank() != world.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bridge '", name, "': grids were built for world ranks ", source.world_rank(), " and ",
        destination.world_rank(), ", but world '", world.name(), "' is rank ", world.rank()));
  }
  Bridge b;
  b.name_ = name;
  b.source_ = &source;
  b.destination_ = &destination;
  b.world_ = &world;
  b.alloc_ = &alloc;
  b.stream_ = options.cuda_stream;
  if (comm::MovesDeviceMemory(world) && !alloc.device().is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bridge '", name, "': world '", world.name(), "' (", world.backend(),
        ") moves device memory; give the bridge a GPU allocator"));
  }
  b.colocated_ = source.offset() == destination.offset() && source.size() == destination.size();
  if (!b.colocated_ && source.offset() < destination.offset() + destination.size() &&
      destination.offset() < source.offset() + source.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bridge '", name, "': grids ", where(source), " and ", where(destination),
                     " overlap; a bridge needs disjoint or identical (colocated) grids"));
  }
  const int s = source.num_data_lanes(), d = destination.num_data_lanes();
  if (s % d != 0 && d % s != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bridge '", name, "': source grid '", source.name(), "' has ", s,
                     " data lanes and destination grid '", destination.name(), "' has ", d,
                     "; one count must divide the other"));
  }
  if (!b.colocated_) {
    for (const HyperCommGrid* g : {&source, &destination}) {
      if (g->config().cp > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("bridge '", name, "': grid '", g->name(), "' has CP ", g->config().cp,
                         "; context parallelism on a bridged module is not supported"));
      }
    }
  }
  const int last = source.config().pp - 1;
  GTP_ASSIGN_OR_RETURN(b.source_leaders_, source.LaneLeaders(last));
  GTP_ASSIGN_OR_RETURN(b.destination_leaders_, destination.LaneLeaders(0));
  b.forward_.from = Side{&source, last, b.source_leaders_};
  b.forward_.to = Side{&destination, 0, b.destination_leaders_};
  b.forward_.tag = options.tag_base;
  b.backward_.from = b.forward_.to;
  b.backward_.to = b.forward_.from;
  b.backward_.tag = options.tag_base + 2;
  if (b.colocated_) {
    GTP_RETURN_IF_ERROR(PlanColocated(name + ".fwd", world, b.forward_));
    GTP_RETURN_IF_ERROR(PlanColocated(name + ".bwd", world, b.backward_));
  }
  // Leaders that exchange point-to-point connect first (NCCL connects a
  // pair lazily and needs both sides' first batches to match; a fan-in
  // leader's first batch receives from k peers). Each direction names
  // its pairs once from each side, so the lists are symmetric.
  std::set<int> peers;
  for (const Route* r : {&b.forward_, &b.backward_}) {
    if (r->mode != Mode::kP2P) continue;
    const Fan fan = FanOf(r->from.grid->num_data_lanes(), r->to.grid->num_data_lanes());
    for (int lane = 0; lane < static_cast<int>(r->from.leaders.size()); ++lane) {
      const int first = fan.gather ? lane / fan.k : lane * fan.k;
      for (int j = 0; j < (fan.gather ? 1 : fan.k); ++j) {
        const int a = r->from.leaders[lane], c = r->to.leaders[first + j];
        if (a == c) continue;
        if (a == world.rank()) peers.insert(c);
        if (c == world.rank()) peers.insert(a);
      }
    }
  }
  GTP_RETURN_IF_ERROR(world.ConnectPeers(std::vector<int>(peers.begin(), peers.end())));
  return b;
}

// Every rank computes the same plan from the grids alone, so the Split below
// is called by all ranks or by none.
absl::Status Bridge::PlanColocated(const std::string& name, comm::Communicator& world,
                                   Route& route) {
  const HyperCommGrid& from = *route.from.grid;
  const HyperCommGrid& to = *route.to.grid;
  const Fan fan = FanOf(from.num_data_lanes(), to.num_data_lanes());
  const int k = fan.k;
  // Receivers of each to-lane, ascending.
  std::vector<std::vector<int>> receivers(to.num_data_lanes());
  for (int r = to.offset(); r < to.offset() + to.size(); ++r) {
    if (!IsHolder(to, route.to.stage, r)) continue;
    if (!IsHolder(from, route.from.stage, r)) return absl::OkStatus();  // stays kP2P
    receivers[LaneOf(to, r)].push_back(r);
  }
  if (!fan.gather || k == 1) {
    for (int lane = 0; lane < to.num_data_lanes(); ++lane) {
      for (int r : receivers[lane]) {
        if (LaneOf(from, r) != (fan.gather ? lane : lane / k)) return absl::OkStatus();
      }
    }
    route.mode = Mode::kNarrow;
    return absl::OkStatus();
  }
  std::vector<std::vector<int>> groups;
  for (int lane = 0; lane < to.num_data_lanes(); ++lane) {
    std::vector<std::vector<int>> buckets(k);
    for (int r : receivers[lane]) {
      const int j = LaneOf(from, r) - lane * k;
      if (j < 0 || j >= k) return absl::OkStatus();
      buckets[j].push_back(r);
    }
    for (const auto& bucket : buckets) {
      if (bucket.size() != buckets[0].size()) return absl::OkStatus();
    }
    for (size_t t = 0; t < buckets[0].size(); ++t) {
      std::vector<int> group;
      for (const auto& bucket : buckets) group.push_back(bucket[t]);
      groups.push_back(std::move(group));
    }
  }
  GTP_ASSIGN_OR_RETURN(route.gather, world.Split(groups, name));
  route.mode = Mode::kGather;
  return absl::OkStatus();
}

std::vector<int> Bridge::SourceLanesOf(int lane) const {
  const Fan fan = FanOf(num_source_lanes(), num_destination_lanes());
  if (!fan.gather) return {lane / fan.k};
  std::vector<int> lanes(fan.k);
  std::iota(lanes.begin(), lanes.end(), lane * fan.k);
  return lanes;
}

absl::StatusOr<LaneBatch> Bridge::Forward(const LaneBatch& input) { return Move(forward_, input); }

absl::StatusOr<LaneBatch> Bridge::Backward(const LaneBatch& grad) { return Move(backward_, grad); }

namespace {

absl::Status CheckBatch(const std::string& bridge, const HyperCommGrid& grid, int lane,
                        const LaneBatch& b) {
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat("bridge '", bridge, "': lane ", lane,
                                                   " of grid '", grid.name(), "': ", what...));
  };
  if (!b.data.defined() || b.data.rank() < 1) return bad("no [n_rows, ...] tensor given");
  if (!b.data.is_contiguous()) return bad("tensor ", b.data.ToString(), " is not contiguous");
  int64_t rows = 0;
  for (int64_t r : b.sample_rows) {
    if (r < 0) return bad("negative sample row count ", r);
    rows += r;
  }
  if (rows != b.data.dim(0)) {
    return bad("sample row counts sum to ", rows, " but the tensor ", b.data.ToString(), " has ",
               b.data.dim(0), " rows");
  }
  return absl::OkStatus();
}

// Splits `b` (a batch of from-lane `lane`) into the k pieces of a scatter:
// along `parts` when `use_parts` and it has k entries, else into equal
// sample groups.
absl::StatusOr<std::vector<Piece>> SplitBatch(const std::string& bridge, const HyperCommGrid& from,
                                              const HyperCommGrid& to, int lane, const LaneBatch& b,
                                              int k, bool use_parts) {
  std::vector<int64_t> counts;
  const int64_t n = b.num_samples();
  if (use_parts && b.parts.size() > 1) {
    if (static_cast<int>(b.parts.size()) != k ||
        std::accumulate(b.parts.begin(), b.parts.end(), int64_t{0}) != n) {
      return absl::InvalidArgumentError(absl::StrCat("bridge '", bridge, "': lane ", lane,
                                                     " of grid '", from.name(), "' has parts [",
                                                     absl::StrJoin(b.parts, ", "), "]; expected ",
                                                     k, " parts summing to its ", n, " samples"));
    }
    counts = b.parts;
  } else {
    if (n % k != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bridge '", bridge, "': lane ", lane, " of grid '", from.name(), "' has ", n,
                       " samples, not divisible into ", k, " equal groups (fan-out to ", k,
                       " lanes of grid '", to.name(), "')"));
    }
    counts.assign(k, n / k);
  }
  std::vector<Piece> pieces(k);
  int64_t sample = 0, row = 0;
  for (int j = 0; j < k; ++j) {
    Piece& p = pieces[j];
    p.first_sample = sample;
    p.num_samples = counts[j];
    p.first_row = row;
    for (int64_t s = 0; s < counts[j]; ++s) p.num_rows += b.sample_rows[sample + s];
    sample += counts[j];
    row += p.num_rows;
  }
  return pieces;
}

}  // namespace

absl::StatusOr<LaneBatch> Bridge::Move(Route& route, const LaneBatch& input) {
  switch (route.mode) {
    case Mode::kP2P:
      return MoveP2P(route, input);
    case Mode::kNarrow:
      return MoveNarrow(route, input);
    case Mode::kGather:
      return MoveGather(route, input);
  }
  return absl::InternalError("unknown bridge mode");
}

absl::StatusOr<LaneBatch> Bridge::MoveNarrow(Route& route, const LaneBatch& input) {
  const int me = world_->rank();
  const HyperCommGrid& from = *route.from.grid;
  const HyperCommGrid& to = *route.to.grid;
  const Fan fan = FanOf(from.num_data_lanes(), to.num_data_lanes());
  if (!IsHolder(from, route.from.stage, me)) return LaneBatch{};
  const int lane = LaneOf(from, me);
  GTP_RETURN_IF_ERROR(CheckBatch(name_, from, lane, input));
  const bool backward = &route == &backward_;
  GTP_ASSIGN_OR_RETURN(std::vector<Piece> pieces,
                       SplitBatch(name_, from, to, lane, input, fan.gather ? 1 : fan.k, backward));
  if (!IsHolder(to, route.to.stage, me)) return LaneBatch{};
  const Piece& p = pieces[fan.gather ? 0 : LaneOf(to, me) % fan.k];
  LaneBatch out;
  out.data = input.data.Slice(p.first_row, p.first_row + p.num_rows);
  out.sample_rows.assign(input.sample_rows.begin() + p.first_sample,
                         input.sample_rows.begin() + p.first_sample + p.num_samples);
  out.parts = {p.num_samples};
  return out;
}

absl::StatusOr<LaneBatch> Bridge::MoveGather(Route& route, const LaneBatch& input) {
  const int me = world_->rank();
  const HyperCommGrid& from = *route.from.grid;
  if (!IsHolder(from, route.from.stage, me)) return LaneBatch{};
  const int lane = LaneOf(from, me);
  absl::Status mine = CheckBatch(name_, from, lane, input);
  if (route.gather == nullptr) {  // not a receiver
    if (!mine.ok()) return mine;
    return LaneBatch{};
  }
  comm::Communicator& g = *route.gather;
  const int k = g.size();
  // Step 1: headers.
  const Header h = mine.ok() ? HeaderOf(input.data, input.num_samples(), 1) : ErrorHeader();
  std::vector<Header> hs(k);
  GTP_RETURN_IF_ERROR(
      comm::AllGatherHost(g, h.data(), hs.data(), kHeaderLen, DType::kI64, staging()));
  GTP_RETURN_IF_ERROR(mine);
  int64_t max_samples = 0, max_rows = 0, rows = 0, samples = 0;
  for (int j = 0; j < k; ++j) {
    if (hs[j][kStatus] != 0 || !SameRowLayout(hs[j], h)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bridge '", name_, "': lane ", lane - g.rank() + j, " of grid '", from.name(), "' ",
          hs[j][kStatus] != 0 ? "has no valid batch (its ranks say why)"
                              : "sent rows of another dtype or shape"));
    }
    max_samples = std::max(max_samples, hs[j][kSamples]);
    max_rows = std::max(max_rows, hs[j][kRows]);
    samples += hs[j][kSamples];
    rows += hs[j][kRows];
  }
  // Step 2: counts and payload, padded to the largest part.
  const DType dtype = input.data.dtype();
  std::vector<int64_t> my_counts(max_samples, 0), counts(k * max_samples);
  std::copy(input.sample_rows.begin(), input.sample_rows.end(), my_counts.begin());
  Tensor send = input.data, recv;
  if (max_rows > 0) {
    if (input.data.dim(0) != max_rows) {
      GTP_ASSIGN_OR_RETURN(send, Tensor::TryEmpty(ShapeOf(h, max_rows), dtype, *alloc_));
      if (input.data.dim(0) > 0) {
        GTP_RETURN_IF_ERROR(Copy(input.data, send.Slice(0, input.data.dim(0)), stream_));
      }
    }
    GTP_ASSIGN_OR_RETURN(recv, Tensor::TryEmpty(ShapeOf(h, k * max_rows), dtype, *alloc_));
  }
  GTP_RETURN_IF_ERROR(comm::AllGatherHost(g, my_counts.data(), counts.data(), max_samples,
                                          DType::kI64, staging()));
  if (max_rows > 0) {
    GTP_RETURN_IF_ERROR(comm::Run(
        g.AllGather(send.raw_data(), recv.raw_data(), max_rows * RowElems(h), dtype)));
  }
  LaneBatch out;
  GTP_ASSIGN_OR_RETURN(out.data, Tensor::TryEmpty(ShapeOf(h, rows), dtype, *alloc_));
  int64_t row = 0;
  for (int j = 0; j < k; ++j) {
    const int64_t n = hs[j][kRows];
    if (n > 0) {
      GTP_RETURN_IF_ERROR(
          Copy(recv.Slice(j * max_rows, j * max_rows + n), out.data.Slice(row, row + n), stream_));
    }
    row += n;
    out.sample_rows.insert(out.sample_rows.end(), counts.begin() + j * max_samples,
                           counts.begin() + j * max_samples + hs[j][kSamples]);
    out.parts.push_back(hs[j][kSamples]);
  }
  return out;
}

absl::StatusOr<LaneBatch> Bridge::MoveP2P(Route& route, const LaneBatch& input) {
  const int me = world_->rank();
  const Side& from = route.from;
  const Side& to = route.to;
  const Fan fan = FanOf(from.grid->num_data_lanes(), to.grid->num_data_lanes());
  const int k = fan.k;
  const bool backward = &route == &backward_;

  // Every holder checks its input, so a bad batch fails on all its ranks.
  absl::Status mine = absl::OkStatus();
  std::vector<Piece> pieces;
  const bool holder = IsHolder(*from.grid, from.stage, me);
  if (holder) {
    const int lane = LaneOf(*from.grid, me);
    mine = CheckBatch(name_, *from.grid, lane, input);
    if (mine.ok() && !fan.gather) {
      absl::StatusOr<std::vector<Piece>> split =
          SplitBatch(name_, *from.grid, *to.grid, lane, input, k, backward);
      if (split.ok()) {
        pieces = *std::move(split);
      } else {
        mine = split.status();
      }
    }
    if (mine.ok() && fan.gather) {
      pieces = {Piece{0, input.num_samples(), 0, input.data.dim(0)}};
    }
  }

  // Messages of this rank: sends as from-leader, receives as to-leader.
  struct Msg {
    int peer;
    int lane;  // the other side's lane
    Header header{};
    Piece piece;  // sends: which part of `input`
    std::vector<int64_t> counts;
    Tensor payload;
  };
  std::vector<Msg> sends, recvs;
  const int send_lane = IndexOf(from.leaders, me);
  if (send_lane >= 0) {
    const int first = fan.gather ? send_lane / k : send_lane * k;
    const int n = fan.gather ? 1 : k;
    for (int j = 0; j < n; ++j) {
      Msg m;
      m.peer = to.leaders[first + j];
      m.lane = first + j;
      if (mine.ok()) {
        m.piece = pieces[j];
        m.payload = input.data.Slice(m.piece.first_row, m.piece.first_row + m.piece.num_rows);
        m.header = HeaderOf(m.payload, m.piece.num_samples, 1);
        m.counts.assign(input.sample_rows.begin() + m.piece.first_sample,
                        input.sample_rows.begin() + m.piece.first_sample + m.piece.num_samples);
      } else {
        m.header = ErrorHeader();
      }
      sends.push_back(std::move(m));
    }
  }
  const int recv_lane = IndexOf(to.leaders, me);
  if (recv_lane >= 0) {
    const int first = fan.gather ? recv_lane * k : recv_lane / k;
    for (int j = 0; j < (fan.gather ? k : 1); ++j) {
      Msg m;
      m.lane = first + j;
      m.peer = from.leaders[m.lane];
      recvs.push_back(std::move(m));
    }
  }
  // The send to this rank itself, if any, matching receive `r`.
  auto self_send = [&](const Msg& r) -> Msg* {
    for (Msg& s : sends) {
      if (s.peer == me && r.peer == me) return &s;
    }
    return nullptr;
  };

  // Step 1: headers. Everything posted, then waited.
  comm::HostExchange headers(*world_, staging());
  for (Msg& s : sends) {
    if (s.peer == me) continue;
    GTP_RETURN_IF_ERROR(headers.Send(s.header.data(), kHeaderLen, DType::kI64, s.peer, route.tag));
  }
  for (Msg& r : recvs) {
    if (Msg* s = self_send(r)) {
      r.header = s->header;
      continue;
    }
    GTP_RETURN_IF_ERROR(headers.Recv(r.header.data(), kHeaderLen, DType::kI64, r.peer, route.tag));
  }
  GTP_RETURN_IF_ERROR(headers.Wait());

  // What arrives: one batch of the to-lane, or the reason there is none.
  absl::Status got = absl::OkStatus();
  LaneBatch out;
  Header first_ok{};
  int64_t rows = 0;
  for (const Msg& r : recvs) {
    if (r.header[kStatus] != 0) {
      got.Update(absl::InvalidArgumentError(
          absl::StrCat("bridge '", name_, "': lane ", r.lane, " of grid '", from.grid->name(),
                       "' (world rank ", r.peer, ") sent no batch; its ranks say why")));
      continue;
    }
    if (first_ok[kNDim] == 0) first_ok = r.header;
    if (!SameRowLayout(first_ok, r.header)) {
      got.Update(absl::InvalidArgumentError(
          absl::StrCat("bridge '", name_, "': lanes of grid '", from.grid->name(),
                       "' sent rows of different dtypes or shapes to lane ", recv_lane)));
    }
    rows += r.header[kRows];
  }
  if (recv_lane >= 0 && got.ok()) {
    GTP_ASSIGN_OR_RETURN(out.data, Tensor::TryEmpty(ShapeOf(first_ok, rows),
                                                    static_cast<DType>(first_ok[kDType]), *alloc_));
  }

  // Step 2: per-sample row counts, then payload. Receivers of a bad set of
  // headers still drain the good parts (into their own buffers) so no
  // sender is left waiting. Each pair's counts go before its payload, in
  // the same order on both sides (NCCL pairs point-to-point by order).
  comm::HostExchange counts(*world_, staging());
  std::vector<comm::WorkPtr> works;
  for (Msg& s : sends) {
    if (s.header[kStatus] != 0 || s.peer == me) continue;
    if (s.header[kSamples] > 0) {
      GTP_RETURN_IF_ERROR(counts.Send(s.counts.data(), s.header[kSamples], DType::kI64, s.peer,
                                      route.tag + 1));
    }
    if (s.payload.numel() > 0) {
      GTP_ASSIGN_OR_RETURN(works.emplace_back(),
                           world_->Send(s.payload.raw_data(), s.payload.numel(), s.payload.dtype(),
                                        s.peer, route.tag + 1));
    }
  }
  int64_t row = 0;
  for (Msg& r : recvs) {
    if (r.header[kStatus] != 0) continue;
    const int64_t n = r.header[kRows];
    if (got.ok()) {
      r.payload = out.data.Slice(row, row + n);
    } else {
      GTP_ASSIGN_OR_RETURN(
          r.payload,
          Tensor::TryEmpty(ShapeOf(r.header, n), static_cast<DType>(r.header[kDType]), *alloc_));
    }
    row += n;
    r.counts.resize(r.header[kSamples]);
    if (Msg* s = self_send(r)) {
      r.counts = s->counts;
      if (n > 0) GTP_RETURN_IF_ERROR(Copy(s->payload, r.payload, stream_));
      continue;
    }
    if (!r.counts.empty()) {
      GTP_RETURN_IF_ERROR(counts.Recv(r.counts.data(), r.header[kSamples], DType::kI64, r.peer,
                                      route.tag + 1));
    }
    if (r.payload.numel() > 0) {
      GTP_ASSIGN_OR_RETURN(works.emplace_back(),
                           world_->Recv(r.payload.raw_data(), r.payload.numel(), r.payload.dtype(),
                                        r.peer, route.tag + 1));
    }
  }
  for (auto& w : works) GTP_RETURN_IF_ERROR(w->Wait());
  GTP_RETURN_IF_ERROR(counts.Wait());
  for (const Msg& r : recvs) {
    out.sample_rows.insert(out.sample_rows.end(), r.counts.begin(), r.counts.end());
    out.parts.push_back(r.header[kSamples]);
  }

  if (IsHolder(*to.grid, to.stage, me)) {
    absl::Status b = BroadcastInLane(to, recv_lane < 0 || got.ok(), out);
    got.Update(b);
  } else {
    out = LaneBatch{};
  }
  mine.Update(got);
  if (!mine.ok()) return mine;
  return out;
}

// The lane leader has `out` (or, when !ok, an error to pass on); the other
// ranks of its tp_cp group receive header, counts and payload from it.
absl::Status Bridge::BroadcastInLane(const Side& to, bool ok, LaneBatch& out) {
  const int me = world_->rank();
  GTP_ASSIGN_OR_RETURN(const parallel::ProcessGroupCollection* groups, to.grid->groups());
  GTP_ASSIGN_OR_RETURN(std::vector<int> members, groups->Ranks("tp_cp"));
  if (members.size() == 1) return absl::OkStatus();
  GTP_ASSIGN_OR_RETURN(comm::Communicator * g, groups->Get(parallel::groups::kTpCp));
  const int leader = to.leaders[LaneOf(*to.grid, me)];
  const int root = IndexOf(members, leader);
  const bool is_root = me == leader;
  Header h{};
  if (is_root) {
    h = ok ? HeaderOf(out.data, out.num_samples(), static_cast<int64_t>(out.parts.size()))
           : ErrorHeader();
  }
  GTP_RETURN_IF_ERROR(comm::BroadcastHost(*g, h.data(), kHeaderLen, DType::kI64, root, staging()));
  if (h[kStatus] != 0) {
    if (is_root) return absl::OkStatus();  // the leader returns its own error
    return absl::InvalidArgumentError(absl::StrCat("bridge '", name_, "': lane leader (world rank ",
                                                   leader, ") of grid '", to.grid->name(),
                                                   "' received no batch; it says why"));
  }
  const int64_t n_samples = h[kSamples], n_parts = h[kParts];
  std::vector<int64_t> counts(n_samples + n_parts);
  if (is_root) {
    std::copy(out.sample_rows.begin(), out.sample_rows.end(), counts.begin());
    std::copy(out.parts.begin(), out.parts.end(), counts.begin() + n_samples);
  } else {
    GTP_ASSIGN_OR_RETURN(
        out.data, Tensor::TryEmpty(ShapeOf(h, h[kRows]), static_cast<DType>(h[kDType]), *alloc_));
  }
  GTP_RETURN_IF_ERROR(comm::BroadcastHost(*g, counts.data(), static_cast<int64_t>(counts.size()),
                                          DType::kI64, root, staging()));
  if (out.data.numel() > 0) {
    GTP_RETURN_IF_ERROR(comm::Run(
        g->Broadcast(out.data.raw_data(), out.data.numel(), out.data.dtype(), root)));
  }
  if (!is_root) {
    out.sample_rows.assign(counts.begin(), counts.begin() + n_samples);
    out.parts.assign(counts.begin() + n_samples, counts.end());
  }
  return absl::OkStatus();
}

}  // namespace gtp::mimo
