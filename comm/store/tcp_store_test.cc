#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::comm {
namespace {

using ::testing::HasSubstr;

const absl::Duration kT = absl::Seconds(5);

// The same behaviour from both implementations.
class StoreTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      auto server = TcpStoreServer::Start(0, "127.0.0.1");
      ASSERT_TRUE(server.ok()) << server.status();
      server_ = std::move(*server);
    }
  }
  std::unique_ptr<KeyValueStore> NewClient() {
    if (!GetParam()) {
      // All "clients" of the in-memory store share one object.
      struct View : KeyValueStore {
        KeyValueStore* s;
        absl::Status Set(std::string_view k, std::string_view v, absl::Duration t) override { return s->Set(k, v, t); }
        absl::StatusOr<std::string> Get(std::string_view k, absl::Duration t) override { return s->Get(k, t); }
        absl::StatusOr<std::string> TryGet(std::string_view k, absl::Duration t) override { return s->TryGet(k, t); }
        absl::StatusOr<int64_t> Add(std::string_view k, int64_t d, absl::Duration t) override { return s->Add(k, d, t); }
        absl::Status Wait(const std::vector<std::string>& k, absl::Duration t) override { return s->Wait(k, t); }
      };
      auto v = std::make_unique<View>();
      v->s = &mem_;
      return v;
    }
    auto c = TcpStoreClient::Connect("127.0.0.1", server_->port(), kT);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::unique_ptr<TcpStoreServer> server_;
  InMemoryStore mem_;
};

TEST_P(StoreTest, SetThenGet) {
  auto s = NewClient();
  ASSERT_TRUE(s->Set("a", std::string("x\0y", 3), kT).ok());
  auto v = s->Get("a", kT);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("x\0y", 3));
  ASSERT_TRUE(s->Set("a", "z", kT).ok());
  EXPECT_EQ(*s->Get("a", kT), "z");
  EXPECT_EQ(*s->TryGet("a", kT), "z");
  EXPECT_EQ(s->TryGet("missing", kT).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, GetBlocksUntilAnotherClientSets) {
  auto a = NewClient(), b = NewClient();
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(b->Set("late", "v", kT).ok());
  });
  absl::Time t0 = absl::Now();
  auto v = a->Get("late", kT);
  t.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(90));
}

TEST_P(StoreTest, GetAndWaitTimeOutNamingTheKey) {
  auto s = NewClient();
  absl::Time t0 = absl::Now();
  auto v = s->Get("never", absl::Milliseconds(200));
  absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("'never'"));
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(2));
  ASSERT_TRUE(s->Set("k1", "", kT).ok());
  absl::Status w = s->Wait({"k1", "k2"}, absl::Milliseconds(100));
  EXPECT_EQ(w.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(w.message()), HasSubstr("'k2'"));
  EXPECT_THAT(std::string(w.message()), ::testing::Not(HasSubstr("'k1'")));
  ASSERT_TRUE(s->Set("k2", "", kT).ok());
  EXPECT_TRUE(s->Wait({"k1", "k2"}, kT).ok());
}

TEST_P(StoreTest, AddIsAtomicAcrossClients) {
  constexpr int kThreads = 4, kAdds = 200;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&, i] {
      auto c = NewClient();
      for (int j = 0; j < kAdds; ++j) ASSERT_TRUE(c->Add("ctr", i + 1, kT).ok());
    });
  }
  for (auto& t : ts) t.join();
  auto s = NewClient();
  auto v = s->Add("ctr", 0, kT);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, kAdds * (1 + 2 + 3 + 4));
  EXPECT_EQ(*s->Get("ctr", kT), absl::StrCat(kAdds * 10));
  ASSERT_TRUE(s->Set("text", "abc", kT).ok());
  EXPECT_EQ(s->Add("text", 1, kT).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, LargeValues) {
  auto s = NewClient();
  std::string big(3 << 20, 'q');
  big[12345] = 'z';
  ASSERT_TRUE(s->Set("big", big, kT).ok());
  EXPECT_EQ(*s->Get("big", kT), big);
}

INSTANTIATE_TEST_SUITE_P(Impl, StoreTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tcp" : "InMemory"; });

TEST(TcpStore, ConnectToWrongPortFailsInBoundedTime) {
  // Find a port nobody listens on: bind one, note it, stop it.
  int port;
  {
    auto s = TcpStoreServer::Start(0, "127.0.0.1");
    ASSERT_TRUE(s.ok());
    port = (*s)->port();
  }
  absl::Time t0 = absl::Now();
  auto c = TcpStoreClient::Connect("127.0.0.1", port, absl::Milliseconds(500));
  absl::Duration took = absl::Now() - t0;
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("Connection refused"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("MASTER_PORT"));
  EXPECT_GE(took, absl::Milliseconds(450));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(TcpStore, PortInUseIsAClearError) {
  auto a = TcpStoreServer::Start(0, "127.0.0.1");
  ASSERT_TRUE(a.ok());
  auto b = TcpStoreServer::Start((*a)->port(), "127.0.0.1");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("Address already in use"));
}

// A bound, listening socket made elsewhere (gtprun's GTP_STORE_FD).
int ListeningSocket(int* port, bool listening = true) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (listening) {
    EXPECT_EQ(listen(fd, 16), 0);
  }
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(TcpStore, AdoptedSocketServes) {
  int port = 0;
  const int fd = ListeningSocket(&port);
  auto server = TcpStoreServer::StartOrAdopt(port, fd);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->port(), port);
  auto a = TcpStoreClient::Connect("127.0.0.1", port, kT);
  auto b = TcpStoreClient::Connect("127.0.0.1", port, kT);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Set("k", "v", kT).ok());
  auto v = (*b)->Get("k", kT);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

TEST(TcpStore, AdoptRefusesWhatIsNotTheListeningSocketOfThePort) {
  int port = 0;
  const int fd = ListeningSocket(&port);
  auto wrong_port = TcpStoreServer::Adopt(fd, port == 65535 ? 1 : port + 1);
  ASSERT_FALSE(wrong_port.ok());
  EXPECT_THAT(std::string(wrong_port.status().message()),
              HasSubstr(absl::StrCat("listens on port ", port, ", not MASTER_PORT=")));
  int port2 = 0;
  const int quiet = ListeningSocket(&port2, /*listening=*/false);
  auto not_listening = TcpStoreServer::Adopt(quiet, port2);
  ASSERT_FALSE(not_listening.ok());
  EXPECT_THAT(std::string(not_listening.status().message()), HasSubstr("does not listen"));
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[1]);
  auto not_socket = TcpStoreServer::Adopt(pipe_fds[0], port);
  ASSERT_FALSE(not_socket.ok());
  EXPECT_THAT(std::string(not_socket.status().message()),
              HasSubstr(absl::StrCat("inherited fd ", pipe_fds[0], " (GTP_STORE_FD) is not a socket")));
}

TEST(TcpStore, ServerGoneIsUnavailable) {
  auto server = TcpStoreServer::Start(0, "127.0.0.1");
  ASSERT_TRUE(server.ok());
  auto c = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), kT);
  ASSERT_TRUE(c.ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    server->reset();
  });
  absl::Time t0 = absl::Now();
  auto v = (*c)->Get("never", absl::Seconds(30));
  stopper.join();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("closed the connection"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
}

}  // namespace
}  // namespace gtp::comm
