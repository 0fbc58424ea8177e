// comm/store/tcp_store.h — the rendezvous store over TCP.
//
// Rank 0 runs a TcpStoreServer on MASTER_ADDR:MASTER_PORT; every rank (rank 0
// too) talks to it through a TcpStoreClient. The server is one thread with a
// poll loop: it never blocks on a client, keeps blocked Get/Wait requests
// parked until their keys appear or their deadlines pass, and forgets a
// client's parked requests when it disconnects. The wire format is private
// to this file pair (length-prefixed frames).
//
//   GTP_ASSIGN_OR_RETURN(auto server, TcpStoreServer::Start(port));   // rank 0
//   GTP_ASSIGN_OR_RETURN(auto store,
//       TcpStoreClient::Connect(addr, port, absl::Seconds(30)));       // all ranks
//   GTP_RETURN_IF_ERROR(store->Set("k", "v", absl::Seconds(5)));
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/store/key_value_store.h"

namespace gtp::comm {

class TcpStoreServer {
 public:
  // Binds `bind_addr:port` (port 0 picks a free port) and starts serving on
  // a background thread. Fails (Unavailable, naming the address) when the
  // port cannot be bound. Non-blocking.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      int port, const std::string& bind_addr = "0.0.0.0");
  // Serves on `listen_fd`, a socket already bound and listening on `port`
  // that a launcher made and handed down (gtprun's GTP_STORE_FD: it holds the
  // port from the moment it picks it, so no other process can take it before
  // rank 0 listens). Takes ownership of the fd (closed on failure too).
  // InvalidArgument, naming the fd, when it is not a listening TCP socket or
  // is bound to another port.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Adopt(int listen_fd, int port);
  // Adopt(inherited_fd, port) when inherited_fd >= 0, else Start(port):
  // what rank 0 calls with LaunchEnv's master_port and store_fd.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> StartOrAdopt(int port, int inherited_fd);
  // Stops serving and closes every connection; blocks until the thread ends.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The bound port. Thread-safe, non-blocking.
  int port() const { return port_; }
  // Makes the destructor wait (at most `d`) until every client has
  // disconnected, so ranks that are still reading a failure from the store
  // see it instead of a closed connection. Thread-safe.
  void set_linger(absl::Duration d) { linger_ms_ = absl::ToInt64Milliseconds(d); }
  // Clients connected now. Thread-safe, non-blocking.
  int num_clients() const { return num_clients_; }

 private:
  TcpStoreServer(int listen_fd, int wake_fd, int port);
  void Serve();

  const int listen_fd_;
  const int wake_fd_;  // eventfd: written by the destructor to stop Serve()
  const int port_;
  std::atomic<int64_t> linger_ms_{0};
  std::atomic<int> num_clients_{0};
  std::thread thread_;
};

// A connection to a TcpStoreServer. Every method is thread-safe (requests
// from several threads are serialised on the one connection) and blocks at
// most its timeout plus a short grace for the network.
class TcpStoreClient : public KeyValueStore {
 public:
  // Connects to host:port, retrying until `timeout` (the server may start
  // after the clients). Unavailable, naming the address and the last error,
  // when it cannot. Blocks.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                                 absl::Duration timeout);
  ~TcpStoreClient() override;

  absl::Status Set(std::string_view key, std::string_view value, absl::Duration timeout) override;
  absl::StatusOr<std::string> Get(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<std::string> TryGet(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(std::string_view key, int64_t delta, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  TcpStoreClient(int fd, std::string where) : fd_(fd), where_(std::move(where)) {}
  // Sends one request and returns the reply's (status byte, payload).
  absl::StatusOr<std::pair<uint8_t, std::string>> Call(const std::string& request,
                                                       absl::Duration timeout);

  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
  const std::string where_;  // "host:port", for errors
};

}  // namespace gtp::comm
