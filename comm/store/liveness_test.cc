// Liveness over an in-memory store (ranks as objects of one process) and over
// the TCP store: a rank whose heartbeat stops is named, the ones that beat
// are not, and a store that goes away is reported as rank 0 gone.
#include "comm/store/liveness.h"

#include <memory>

#include "comm/store/key_value_store.h"
#include "comm/store/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Diagnose waits 3 periods for a beat: 600 ms, far beyond a thread's scheduling delay on a
// loaded 2-core machine, so a beating rank is never taken for dead.
constexpr absl::Duration kPeriod = absl::Milliseconds(200);

TEST(Liveness, NamesTheRankWhoseHeartbeatStopped) {
  auto store = std::make_shared<InMemoryStore>();
  auto r0 = Liveness::Start(store, "t", 0, 4, kPeriod);
  auto r1 = Liveness::Start(store, "t", 1, 4, kPeriod);
  auto r3 = Liveness::Start(store, "t", 3, 4, kPeriod);
  {
    auto r2 = Liveness::Start(store, "t", 2, 4, kPeriod);
    absl::SleepFor(3 * kPeriod);
  }  // rank 2 dies
  r3.reset();  // and rank 3
  const std::string d = r0->Diagnose();
  EXPECT_THAT(d, HasSubstr("(world rank 2) is gone"));
  EXPECT_THAT(d, HasSubstr("(world rank 3) is gone"));
  EXPECT_THAT(d, Not(HasSubstr("world rank 1")));
  EXPECT_EQ(r0->Diagnose(), d);  // answered once
}

TEST(Liveness, EveryRankBeating) {
  auto store = std::make_shared<InMemoryStore>();
  auto r0 = Liveness::Start(store, "t", 0, 2, kPeriod);
  auto r1 = Liveness::Start(store, "t", 1, 2, kPeriod);
  EXPECT_THAT(r1->Diagnose(), HasSubstr("every other rank's heartbeat still runs"));
}

TEST(Liveness, StoreHostGone) {
  auto server = TcpStoreServer::Start(0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  auto r1 = Liveness::Start(std::shared_ptr<KeyValueStore>(std::move(*client)), "t", 1, 2, kPeriod);
  server->reset();  // rank 0 and its store are gone
  EXPECT_THAT(r1->Diagnose(), HasSubstr("(world rank 0) is gone or unreachable"));
}

}  // namespace
}  // namespace gtp::comm
