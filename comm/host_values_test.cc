// Host arrays over a host backend (4 threads): the values every rank must
// end with, worked out by hand from each rank's inputs. The staged path
// (NCCL) runs in //mimo:bridge_nccl_gpu_test on the GPU machine.
#include "comm/host_values.h"

#include <vector>

#include "comm/local/local_communicator.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

TEST(HostValues, CollectivesOnAHostBackend) {
  ASSERT_TRUE(RunRanks(4, [](Communicator& c) -> absl::Status {
                const int r = c.rank();
                EXPECT_FALSE(MovesDeviceMemory(c));
                // Sum of (r + 1) and of 10·r over ranks 0..3: 10 and 60.
                std::vector<float> f = {static_cast<float>(r + 1), 10.0f * r};
                GTP_RETURN_IF_ERROR(AllReduceHost(c, f.data(), 2, DType::kF32, ReduceOp::kSum, {}));
                GTP_RETURN_IF_ERROR(Expect(f[0] == 10.0f && f[1] == 60.0f, "all-reduce"));
                // Max over ranks of 5 - r: 5.
                std::vector<int64_t> m = {5 - r};
                GTP_RETURN_IF_ERROR(AllReduceHost(c, m.data(), 1, DType::kI64, ReduceOp::kMax, {}));
                GTP_RETURN_IF_ERROR(Expect(m[0] == 5, "all-reduce max"));
                // Gather {r, r²}: 0 0 1 1 2 4 3 9.
                const std::vector<int64_t> mine = {r, r * r};
                std::vector<int64_t> all(8, -1);
                GTP_RETURN_IF_ERROR(AllGatherHost(c, mine.data(), all.data(), 2, DType::kI64, {}));
                GTP_RETURN_IF_ERROR(
                    Expect(all == std::vector<int64_t>({0, 0, 1, 1, 2, 4, 3, 9}), "all-gather"));
                // Rank 2's values everywhere.
                std::vector<int64_t> b = {100 + r, 200 + r};
                GTP_RETURN_IF_ERROR(BroadcastHost(c, b.data(), 2, DType::kI64, /*root=*/2, {}));
                GTP_RETURN_IF_ERROR(Expect(b[0] == 102 && b[1] == 202, "broadcast"));
                // A ring: each rank sends {r, 7} right and receives its left
                // neighbour's, two arrays in one exchange.
                const int right = (r + 1) % 4, left = (r + 3) % 4;
                const std::vector<int64_t> out = {r, 7};
                std::vector<int64_t> in(2, -1);
                HostExchange x(c, {});
                GTP_RETURN_IF_ERROR(x.Send(out.data(), 2, DType::kI64, right, 3));
                GTP_RETURN_IF_ERROR(x.Recv(in.data(), 2, DType::kI64, left, 3));
                GTP_RETURN_IF_ERROR(x.Wait());
                return Expect(in[0] == left && in[1] == 7, "exchange");
              }).ok());
}

TEST(HostValues, OneRankLeavesValues) {
  ASSERT_TRUE(RunRanks(1, [](Communicator& c) -> absl::Status {
                float v = 3.5f;
                GTP_RETURN_IF_ERROR(AllReduceHost(c, &v, 1, DType::kF32, ReduceOp::kSum, {}));
                return Expect(v == 3.5f, "one rank");
              }).ok());
}

}  // namespace
}  // namespace gtp::comm
