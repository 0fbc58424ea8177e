#include "mimo/bridge.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/counting.h"
#include "comm/local/local_communicator.h"
#include "core/allocator.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::mimo {
namespace {

using parallel::HyperCommGrid;
using parallel::ParallelConfig;

struct Module {
  ParallelConfig config;
  int offset, size;
};

// One bridge run: source "vision" -> destination "language".
struct Case {
  int world;
  Module src, dst;
  int samples = 4;  // per source lane
  // When set, overrides `samples` per source lane (fan-in only).
  std::function<int(int lane)> lane_samples;
  DType dtype = DType::kF32;
  int64_t cols = 3;
  // Rows of sample `s` of source lane `lane`: uneven by default.
  std::function<int64_t(int lane, int s)> rows = [](int lane, int s) {
    return 1 + (lane + 2 * s) % 3;
  };
};

// What one rank saw.
struct Report {
  bool ran = false;
  bool got_forward = false, got_backward = false;
  bool forward_aliases_input = false;
  comm::ByteCounts traffic;  // Forward + Backward only
  std::vector<int> src_leaders, dst_leaders;
  Bridge::Mode forward_mode = Bridge::Mode::kP2P, backward_mode = Bridge::Mode::kP2P;
  std::vector<int64_t> forward_parts;
};

// Encodes (source lane, sample, row, column); small enough to be exact in
// bf16 when `small`.
float Value(int lane, int s, int64_t row, int64_t col, bool small) {
  if (small) return static_cast<float>(lane * 32 + s * 8 + row * 2 + col);
  return static_cast<float>(lane * 100000 + s * 1000 + row * 10 + col);
}

float Get(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kBF16) return ToF32(static_cast<const bf16*>(t.raw_data())[i]);
  return static_cast<const float*>(t.raw_data())[i];
}
void Set(const Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::kBF16) {
    static_cast<bf16*>(t.raw_data())[i] = ToBF16(v);
  } else {
    static_cast<float*>(t.raw_data())[i] = v;
  }
}

// The batch holding samples `which` = {(source lane, sample)} in order,
// values negated when `grad`.
LaneBatch MakeBatch(const Case& c, const std::vector<std::pair<int, int>>& which, bool grad,
                    Allocator& alloc) {
  LaneBatch b;
  int64_t total = 0;
  for (auto [lane, s] : which) {
    b.sample_rows.push_back(c.rows(lane, s));
    total += b.sample_rows.back();
  }
  b.data = Tensor::Empty({total, c.cols}, c.dtype, alloc);
  int64_t i = 0;
  for (auto [lane, s] : which) {
    for (int64_t r = 0; r < c.rows(lane, s); ++r) {
      for (int64_t col = 0; col < c.cols; ++col) {
        const float v = Value(lane, s, r, col, c.dtype == DType::kBF16);
        Set(b.data, i++, grad ? -v : v);
      }
    }
  }
  return b;
}

void ExpectSame(const LaneBatch& got, const LaneBatch& want, const std::string& what) {
  ASSERT_TRUE(got.data.defined()) << what;
  ASSERT_EQ(got.data.shape(), want.data.shape()) << what;
  ASSERT_EQ(got.data.dtype(), want.data.dtype()) << what;
  EXPECT_EQ(got.sample_rows, want.sample_rows) << what;
  for (int64_t i = 0; i < want.data.numel(); ++i) {
    if (Get(got.data, i) != Get(want.data, i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << Get(got.data, i) << ", want "
                    << Get(want.data, i);
      return;
    }
  }
}

int Samples(const Case& c, int lane) { return c.lane_samples ? c.lane_samples(lane) : c.samples; }

bool OnStage(const HyperCommGrid& g, int rank, int stage) {
  return g.Contains(rank) && g.dense().Coordinates(rank)->pp == stage;
}

// Runs Forward then Backward (gradient = -output) on every rank, checking
// every element on every rank that should hold a batch.
absl::Status RunCase(const Case& c, std::vector<Report>* reports = nullptr) {
  std::vector<Report> local(c.world);
  comm::LocalOptions options;
  options.timeout = absl::Seconds(10);
  absl::Status s = comm::RunRanks(
      c.world,
      [&](comm::Communicator& inner) -> absl::Status {
        auto counter = std::make_shared<comm::ByteCounter>();
        comm::CountingCommunicator world(&inner, counter);
        const int me = world.rank();
        Report& rep = local[me];
        GTP_ASSIGN_OR_RETURN(
            HyperCommGrid src,
            HyperCommGrid::Create("vision", c.src.config, c.src.offset, c.src.size, world));
        GTP_ASSIGN_OR_RETURN(
            HyperCommGrid dst,
            HyperCommGrid::Create("language", c.dst.config, c.dst.offset, c.dst.size, world));
        HeapAllocator alloc;
        GTP_ASSIGN_OR_RETURN(Bridge bridge, Bridge::Create("v2l", src, dst, world, alloc));
        rep.src_leaders = bridge.source_leaders();
        rep.dst_leaders = bridge.destination_leaders();
        rep.forward_mode = bridge.forward_mode();
        rep.backward_mode = bridge.backward_mode();
        counter->Reset();

        const int S = bridge.num_source_lanes(), D = bridge.num_destination_lanes();
        const bool src_holder = OnStage(src, me, src.config().pp - 1);
        const bool dst_holder = OnStage(dst, me, 0);
        LaneBatch in;
        int src_lane = -1;
        if (src_holder) {
          src_lane = *src.DataLane(me);
          std::vector<std::pair<int, int>> which;
          for (int i = 0; i < Samples(c, src_lane); ++i) which.push_back({src_lane, i});
          in = MakeBatch(c, which, false, alloc);
        }
        GTP_ASSIGN_OR_RETURN(LaneBatch out, bridge.Forward(in));
        rep.got_forward = out.data.defined();
        rep.forward_parts = out.parts;
        rep.forward_aliases_input =
            out.data.defined() && in.data.defined() && out.data.storage() == in.data.storage();
        LaneBatch grad;
        if (dst_holder) {
          // Expected samples of this destination lane.
          const int lane = *dst.DataLane(me);
          std::vector<std::pair<int, int>> which;
          std::vector<int64_t> parts;
          if (S >= D) {
            for (int l : bridge.SourceLanesOf(lane)) {
              for (int i = 0; i < Samples(c, l); ++i) which.push_back({l, i});
              parts.push_back(Samples(c, l));
            }
          } else {
            const int k = D / S, per = c.samples / k, j = lane % k;
            for (int i = j * per; i < (j + 1) * per; ++i) which.push_back({lane / k, i});
            parts.push_back(per);
          }
          ExpectSame(out, MakeBatch(c, which, false, alloc),
                     absl::StrCat("forward on rank ", me, " (language lane ", lane, ")"));
          EXPECT_EQ(out.parts, parts) << "rank " << me;
          grad = MakeBatch(c, which, true, alloc);
          grad.parts = out.parts;
        } else {
          EXPECT_FALSE(out.data.defined()) << "rank " << me << " got a forward batch";
        }
        GTP_ASSIGN_OR_RETURN(LaneBatch back, bridge.Backward(grad));
        rep.got_backward = back.data.defined();
        if (src_holder) {
          std::vector<std::pair<int, int>> which;
          for (int i = 0; i < Samples(c, src_lane); ++i) which.push_back({src_lane, i});
          ExpectSame(back, MakeBatch(c, which, true, alloc),
                     absl::StrCat("backward on rank ", me, " (vision lane ", src_lane, ")"));
        } else {
          EXPECT_FALSE(back.data.defined()) << "rank " << me << " got a backward batch";
        }
        rep.traffic = counter->Snapshot();
        rep.ran = true;
        return absl::OkStatus();
      },
      options);
  if (reports != nullptr) *reports = std::move(local);
  return s;
}

ParallelConfig Config(int tp, int gtp = 1, int dp = 0, int pp = 1, int cp = 1) {
  ParallelConfig c;
  c.tp = tp;
  c.tp_num_weight_shards = tp * gtp;
  c.dp = dp;
  c.pp = pp;
  c.cp = cp;
  return c;
}

int64_t Calls(const Report& r, comm::OpKind k) { return r.traffic.calls[static_cast<int>(k)]; }

void ExpectError(const absl::Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
}

TEST(Bridge, LeaderTablesTwoToTwo) {
  // vision TP2·DP2 on 0-3 (lanes = dp); language TP2·GTP2 on 4-7 (lanes = gtp).
  std::vector<Report> r;
  ASSERT_TRUE(RunCase({8, {Config(2), 0, 4}, {Config(2, 2), 4, 4}}, &r).ok());
  EXPECT_EQ(r[0].src_leaders, (std::vector<int>{0, 2}));
  EXPECT_EQ(r[0].dst_leaders, (std::vector<int>{4, 6}));
  EXPECT_EQ(r[0].forward_mode, Bridge::Mode::kP2P);
  EXPECT_EQ(r[5].forward_parts, (std::vector<int64_t>{4}));
}

TEST(Bridge, LeaderTablesWithPipelineOnEitherSide) {
  // Source PP2: leaders on its last stage (ranks 4-7); stage 0 gets no gradient.
  std::vector<Report> r;
  absl::Status s = RunCase({12, {Config(2, 1, 2, 2), 0, 8}, {Config(2, 2), 8, 4}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[0].src_leaders, (std::vector<int>{4, 6}));
  EXPECT_EQ(r[0].dst_leaders, (std::vector<int>{8, 10}));
  // Destination PP2: receivers on its first stage (4-7); stage 1 gets nothing.
  s = RunCase({12, {Config(2), 0, 4}, {Config(2, 2, 1, 2), 4, 8}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[0].src_leaders, (std::vector<int>{0, 2}));
  EXPECT_EQ(r[0].dst_leaders, (std::vector<int>{4, 6}));
  for (int rank = 8; rank < 12; ++rank) {
    EXPECT_FALSE(r[rank].got_forward) << rank;
    EXPECT_EQ(Calls(r[rank], comm::OpKind::kRecv) + Calls(r[rank], comm::OpKind::kBroadcast), 0);
  }
}

TEST(Bridge, FanInFourToOne) {
  std::vector<Report> r;
  absl::Status s = RunCase({6, {Config(1), 0, 4}, {Config(2), 4, 2}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[4].forward_parts, (std::vector<int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(r[0].src_leaders, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r[0].dst_leaders, (std::vector<int>{4}));
}

TEST(Bridge, FanOutOneToFour) {
  Case c{6, {Config(2), 0, 2}, {Config(1), 2, 4}};
  c.samples = 8;
  absl::Status s = RunCase(c);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Bridge, GtpIsADataLaneOnEitherSide) {
  // Source GTP2·DP2 = 4 lanes -> 1 language lane.
  absl::Status s = RunCase({6, {Config(1, 2, 2), 0, 4}, {Config(2), 4, 2}});
  EXPECT_TRUE(s.ok()) << s;
  // 1 vision lane -> language GTP2·DP2 = 4 lanes.
  s = RunCase({6, {Config(2), 0, 2}, {Config(1, 2, 2), 2, 4}});
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Bridge, UnevenRowsBothDirections) {
  // Zero-row samples included; fan-in 2 -> 1 and fan-out 1 -> 2.
  auto rows = [](int lane, int s) -> int64_t { return (lane * 5 + s * 3) % 4; };
  Case in{4, {Config(1), 0, 2}, {Config(2), 2, 2}};
  in.rows = rows;
  absl::Status s = RunCase(in);
  EXPECT_TRUE(s.ok()) << s;
  Case out{4, {Config(2), 0, 2}, {Config(1), 2, 2}};
  out.rows = rows;
  out.samples = 6;
  s = RunCase(out);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Bridge, FanInLanesWithDifferentSampleCounts) {
  // The backward splits along the forward's lane boundaries, not evenly.
  Case c{4, {Config(1), 0, 2}, {Config(2), 2, 2}};
  c.lane_samples = [](int lane) { return 3 + 2 * lane; };
  std::vector<Report> r;
  absl::Status s = RunCase(c, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[3].forward_parts, (std::vector<int64_t>{3, 5}));
  // Colocated gather: encoder DP4, language TP2·DP2.
  c = Case{4, {Config(1), 0, 4}, {Config(2), 0, 4}};
  c.lane_samples = [](int lane) { return 1 + lane; };
  s = RunCase(c, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[3].forward_parts, (std::vector<int64_t>{3, 4}));
}

TEST(Bridge, Bf16) {
  Case c{8, {Config(2), 0, 4}, {Config(2, 2), 4, 4}};
  c.dtype = DType::kBF16;
  c.cols = 2;
  absl::Status s = RunCase(c);
  EXPECT_TRUE(s.ok()) << s;
  c.src = {Config(1), 0, 4};  // fan-in 4 -> 2
  s = RunCase(c);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Bridge, NonLeadersReceiveByBroadcast) {
  // vision TP2·DP2 on 0-3 -> language TP4 on 4-7 (fan-in 2 -> 1).
  std::vector<Report> r;
  absl::Status s = RunCase({8, {Config(2), 0, 4}, {Config(4), 4, 4}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GT(Calls(r[4], comm::OpKind::kRecv), 0);
  for (int rank : {5, 6, 7}) {  // forward non-leaders
    EXPECT_TRUE(r[rank].got_forward) << rank;
    EXPECT_EQ(Calls(r[rank], comm::OpKind::kRecv), 0) << rank;
    EXPECT_EQ(Calls(r[rank], comm::OpKind::kSend), 0) << rank;
    EXPECT_GT(Calls(r[rank], comm::OpKind::kBroadcast), 0) << rank;
  }
  for (int rank : {1, 3}) {  // backward non-leaders
    EXPECT_TRUE(r[rank].got_backward) << rank;
    EXPECT_EQ(Calls(r[rank], comm::OpKind::kRecv), 0) << rank;
    EXPECT_GT(Calls(r[rank], comm::OpKind::kBroadcast), 0) << rank;
  }
}

TEST(Bridge, ColocatedIdentityIsANarrow) {
  std::vector<Report> r;
  absl::Status s = RunCase({4, {Config(2), 0, 4}, {Config(2), 0, 4}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  for (const Report& rep : r) {
    EXPECT_EQ(rep.forward_mode, Bridge::Mode::kNarrow);
    EXPECT_EQ(rep.backward_mode, Bridge::Mode::kNarrow);
    EXPECT_TRUE(rep.forward_aliases_input);
    for (int64_t calls : rep.traffic.calls) EXPECT_EQ(calls, 0);
  }
}

TEST(Bridge, ColocatedFanInGathersAndFanOutNarrows) {
  // Encoder DP4, language TP2·DP2 on the same 4 ranks: fan-in 4 -> 2.
  std::vector<Report> r;
  absl::Status s = RunCase({4, {Config(1), 0, 4}, {Config(2), 0, 4}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  for (const Report& rep : r) {
    EXPECT_EQ(rep.forward_mode, Bridge::Mode::kGather);
    EXPECT_EQ(rep.backward_mode, Bridge::Mode::kNarrow);
    EXPECT_EQ(Calls(rep, comm::OpKind::kSend) + Calls(rep, comm::OpKind::kRecv), 0);
    EXPECT_GT(Calls(rep, comm::OpKind::kAllGather), 0);
  }
  // Encoder TP2·DP2, language GTP2·DP2 (4 lanes): fan-out 2 -> 4, uneven rows.
  Case out{4, {Config(2), 0, 4}, {Config(1, 2, 2), 0, 4}};
  out.rows = [](int lane, int s) -> int64_t { return (lane + s * 3) % 4; };
  s = RunCase(out, &r);
  ASSERT_TRUE(s.ok()) << s;
  for (const Report& rep : r) {
    EXPECT_EQ(rep.forward_mode, Bridge::Mode::kNarrow);
    EXPECT_EQ(rep.backward_mode, Bridge::Mode::kGather);
    EXPECT_EQ(Calls(rep, comm::OpKind::kSend) + Calls(rep, comm::OpKind::kRecv), 0);
  }
}

TEST(Bridge, ColocatedFallsBackToPointToPoint) {
  // Language lanes ordered dp-first: lane 0 = ranks {0, 2}, which hold
  // encoder lanes 0 and 2, not 0 and 1 — no gather group fits.
  ParallelConfig dp_first = Config(2);
  dp_first.order = "dp-tp";
  std::vector<Report> r;
  absl::Status s = RunCase({4, {Config(1), 0, 4}, {dp_first, 0, 4}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[0].forward_mode, Bridge::Mode::kP2P);
  // Encoder PP2: its last stage alone holds outputs; leaders send to
  // themselves too.
  s = RunCase({4, {Config(1, 1, 2, 2), 0, 4}, {Config(1), 0, 4}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r[0].forward_mode, Bridge::Mode::kP2P);
  EXPECT_EQ(r[0].backward_mode, Bridge::Mode::kP2P);
}

TEST(Bridge, BadLayouts) {
  ExpectError(RunCase({6, {Config(1), 0, 4}, {Config(1), 2, 4}}),
              "grids vision [0, 4) and language [2, 6) overlap");
  ExpectError(RunCase({5, {Config(1), 0, 3}, {Config(1), 3, 2}}),
              "source grid 'vision' has 3 data lanes and destination grid 'language' has 2; "
              "one count must divide the other");
  ExpectError(RunCase({4, {Config(1), 0, 2}, {Config(1, 1, 1, 1, 2), 2, 2}}),
              "grid 'language' has CP 2; context parallelism on a bridged module");
}

TEST(Bridge, FanOutNeedsDivisibleSampleCount) {
  Case c{4, {Config(2), 0, 2}, {Config(1), 2, 2}};
  c.samples = 3;
  absl::Status s = RunCase(c);
  ExpectError(s,
              "ranks 0, 1: INVALID_ARGUMENT: bridge 'v2l': lane 0 of grid 'vision' has 3 samples, "
              "not divisible into 2 equal groups");
  ExpectError(s,
              "ranks 2, 3: INVALID_ARGUMENT: bridge 'v2l': lane 0 of grid 'vision' (world rank 0) "
              "sent no batch");
  // Colocated narrow fails the same way on its own ranks.
  c = Case{4, {Config(2), 0, 4}, {Config(1), 0, 4}};
  c.samples = 3;
  ExpectError(RunCase(c), "has 3 samples, not divisible into 2 equal groups");
}

}  // namespace
}  // namespace gtp::mimo
