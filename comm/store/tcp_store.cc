#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/status.h"

namespace gtp::comm {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kTryGet = 3, kAdd = 4, kWait = 5 };
enum Reply : uint8_t { kOk = 0, kDeadline = 1, kNotFound = 2, kInvalid = 3 };
constexpr uint32_t kMaxFrame = 256u << 20;
// Extra time a client gives the server beyond the request's own timeout.
constexpr absl::Duration kGrace = absl::Seconds(10);

void PutU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void PutI64(std::string* s, int64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
void PutStr(std::string* s, std::string_view v) {
  PutU32(s, static_cast<uint32_t>(v.size()));
  s->append(v.data(), v.size());
}
std::string Frame(const std::string& payload) {
  std::string f;
  PutU32(&f, static_cast<uint32_t>(payload.size()));
  return f + payload;
}

// Reads fields from a payload; any overrun sets ok = false.
struct Reader {
  std::string_view s;
  bool ok = true;
  bool Take(size_t n, const char** p) {
    if (!ok || s.size() < n) return ok = false;
    *p = s.data();
    s.remove_prefix(n);
    return true;
  }
  uint8_t U8() { const char* p; return Take(1, &p) ? static_cast<uint8_t>(*p) : 0; }
  uint32_t U32() {
    const char* p;
    uint32_t v = 0;
    if (Take(4, &p)) std::memcpy(&v, p, 4);
    return v;
  }
  int64_t I64() {
    const char* p;
    int64_t v = 0;
    if (Take(8, &p)) std::memcpy(&v, p, 8);
    return v;
  }
  std::string Str() {
    uint32_t n = U32();
    const char* p;
    return Take(n, &p) ? std::string(p, n) : std::string();
  }
};

int64_t ToMs(absl::Duration d) {
  return d == absl::InfiniteDuration() ? -1 : absl::ToInt64Milliseconds(d);
}

std::string Errno(int e) { return std::strerror(e); }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

// ---- server ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(int port,
                                                                      const std::string& bind_addr) {
  std::string where = absl::StrCat(bind_addr, ":", port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: bad port ", port));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("rendezvous store: socket: ", Errno(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, bind_addr.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: bind address '", bind_addr, "' is not an IPv4 address"));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("rendezvous store: cannot listen on ", where, ": ", Errno(e)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  SetNonBlocking(fd);
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("rendezvous store: eventfd: ", Errno(errno)));
  }
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(fd, wake, ntohs(addr.sin_port)));
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Adopt(int listen_fd, int port) {
  auto refuse = [&](const std::string& why) {
    if (listen_fd >= 0) close(listen_fd);
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: inherited fd ", listen_fd,
                                                   " (GTP_STORE_FD) ", why));
  };
  if (listen_fd < 0) return refuse("is not a file descriptor");
  int listening = 0;
  socklen_t n = sizeof(listening);
  if (getsockopt(listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n) != 0) {
    return refuse(absl::StrCat("is not a socket (", Errno(errno), ")"));
  }
  if (!listening) return refuse("is a socket that does not listen");
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET) {
    return refuse("is not an IPv4 TCP socket");
  }
  if (ntohs(addr.sin_port) != port) {
    return refuse(absl::StrCat("listens on port ", ntohs(addr.sin_port), ", not MASTER_PORT=", port));
  }
  // Ours now: no child of this process inherits it.
  fcntl(listen_fd, F_SETFD, fcntl(listen_fd, F_GETFD) | FD_CLOEXEC);
  SetNonBlocking(listen_fd);
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(listen_fd);
    return absl::UnavailableError(absl::StrCat("rendezvous store: eventfd: ", Errno(errno)));
  }
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(listen_fd, wake, port));
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::StartOrAdopt(int port,
                                                                             int inherited_fd) {
  return inherited_fd >= 0 ? Adopt(inherited_fd, port) : Start(port);
}

TcpStoreServer::TcpStoreServer(int listen_fd, int wake_fd, int port)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port) {
  thread_ = std::thread([this] { Serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  absl::Time until = absl::Now() + absl::Milliseconds(linger_ms_.load());
  while (num_clients_.load() > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void TcpStoreServer::Serve() {
  struct Conn {
    std::string in, out;
    bool closed = false;
  };
  struct Parked {
    int fd;
    uint8_t op;
    std::vector<std::string> keys;
    absl::Time deadline;
    int64_t timeout_ms;
  };
  std::map<int, Conn> conns;
  std::vector<Parked> parked;
  std::map<std::string, std::string> data;

  auto reply = [&](int fd, uint8_t status, const std::string& body) {
    std::string p(1, static_cast<char>(status));
    p += body;
    Conn& c = conns[fd];
    c.out += Frame(p);
    ssize_t n = send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) c.out.erase(0, static_cast<size_t>(n));
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.closed = true;
  };
  // Answers a parked request if it can be answered now; true when answered.
  auto try_answer = [&](const Parked& p, absl::Time now) {
    std::vector<std::string> missing;
    for (const auto& k : p.keys) {
      if (!data.count(k)) missing.push_back(absl::StrCat("'", k, "'"));
    }
    if (missing.empty()) {
      std::string body;
      if (p.op == kGet) PutStr(&body, data[p.keys[0]]);
      reply(p.fd, kOk, body);
      return true;
    }
    if (p.timeout_ms >= 0 && now >= p.deadline) {
      reply(p.fd, kDeadline,
            absl::StrCat("key(s) ", absl::StrJoin(missing, ", "), " did not appear within ",
                         absl::FormatDuration(absl::Milliseconds(p.timeout_ms))));
      return true;
    }
    return false;
  };
  auto handle = [&](int fd, std::string_view payload) {
    Reader r{payload};
    uint8_t op = r.U8();
    std::string key, body;
    switch (op) {
      case kSet: {
        key = r.Str();
        std::string value = r.Str();
        if (!r.ok) break;
        data[key] = std::move(value);
        reply(fd, kOk, "");
        return;
      }
      case kGet: case kWait: {
        Parked p{fd, op, {}, absl::Time(), 0};
        uint32_t n = op == kGet ? 1 : r.U32();
        for (uint32_t i = 0; i < n && r.ok; ++i) p.keys.push_back(r.Str());
        p.timeout_ms = r.I64();
        if (!r.ok) break;
        p.deadline = absl::Now() + absl::Milliseconds(p.timeout_ms);
        if (!try_answer(p, absl::Now())) parked.push_back(std::move(p));
        return;
      }
      case kTryGet: {
        key = r.Str();
        if (!r.ok) break;
        auto it = data.find(key);
        if (it == data.end()) {
          reply(fd, kNotFound, absl::StrCat("no key '", std::string(key), "'"));
        } else {
          PutStr(&body, it->second);
          reply(fd, kOk, body);
        }
        return;
      }
      case kAdd: {
        key = r.Str();
        int64_t delta = r.I64();
        if (!r.ok) break;
        auto v = store_internal::AddToValue(&data[key], delta, key);
        if (!v.ok()) {
          reply(fd, kInvalid, std::string(v.status().message()));
        } else {
          PutI64(&body, *v);
          reply(fd, kOk, body);
        }
        return;
      }
      default: break;
    }
    conns[fd].closed = true;  // malformed request: drop the client
  };

  std::vector<pollfd> fds;
  char buf[65536];
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : conns) {
      fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    }
    absl::Time now = absl::Now();
    int64_t wait_ms = 1000;
    for (const auto& p : parked) {
      if (p.timeout_ms >= 0) {
        wait_ms = std::min<int64_t>(wait_ms, std::max<int64_t>(0, absl::ToInt64Milliseconds(p.deadline - now) + 1));
      }
    }
    int rc = poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
    if (rc < 0 && errno != EINTR) break;
    if (fds[0].revents) break;  // shutting down
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int c = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) break;
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conns[c];
        num_clients_ = static_cast<int>(conns.size());
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      int fd = fds[i].fd;
      Conn& c = conns[fd];
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          ssize_t n = recv(fd, buf, sizeof(buf), 0);
          if (n > 0) {
            c.in.append(buf, static_cast<size_t>(n));
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.closed = true;
          break;
        }
        while (!c.closed && c.in.size() >= 4) {
          uint32_t len;
          std::memcpy(&len, c.in.data(), 4);
          if (len > kMaxFrame) {
            c.closed = true;
            break;
          }
          if (c.in.size() < 4 + len) break;
          std::string payload = c.in.substr(4, len);
          c.in.erase(0, 4 + len);
          handle(fd, payload);
        }
      }
      if ((fds[i].revents & POLLOUT) && !c.out.empty()) {
        ssize_t n = send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) c.out.erase(0, static_cast<size_t>(n));
        else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.closed = true;
      }
    }
    now = absl::Now();
    for (auto it = parked.begin(); it != parked.end();) {
      if (conns[it->fd].closed || try_answer(*it, now)) it = parked.erase(it);
      else ++it;
    }
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->second.closed) {
        close(it->first);
        it = conns.erase(it);
        num_clients_ = static_cast<int>(conns.size());
      } else {
        ++it;
      }
    }
  }
  for (auto& [fd, c] : conns) close(fd);
}

// ---- client ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host,
                                                                      int port,
                                                                      absl::Duration timeout) {
  std::string where = absl::StrCat(host, ":", port);
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: bad port ", port));
  }
  absl::Time deadline = absl::Now() + timeout;
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = absl::StrCat("cannot resolve '", host, "': ", gai_strerror(gai));
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          freeaddrinfo(res);
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, where));
        }
        last_error = Errno(errno);
        close(fd);
      }
      freeaddrinfo(res);
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(std::min(absl::Milliseconds(100), deadline - absl::Now()));
  }
  return absl::UnavailableError(absl::StrCat(
      "rendezvous store: could not connect to ", where, " within ", absl::FormatDuration(timeout),
      " (", last_error, "); check MASTER_ADDR/MASTER_PORT and that rank 0 is running"));
}

TcpStoreClient::~TcpStoreClient() {
  absl::MutexLock l(&mu_);
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::pair<uint8_t, std::string>> TcpStoreClient::Call(const std::string& request,
                                                                     absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  if (fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("rendezvous store at ", where_, ": connection already failed"));
  }
  absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout + kGrace;
  auto fail = [&](const std::string& what) {
    close(fd_);
    fd_ = -1;
    return absl::UnavailableError(absl::StrCat("rendezvous store at ", where_, ": ", what));
  };
  auto wait_for = [&](short events) -> bool {
    for (;;) {
      int ms = deadline == absl::InfiniteFuture()
                   ? 1000
                   : static_cast<int>(std::max<int64_t>(
                         0, std::min<int64_t>(1000, absl::ToInt64Milliseconds(deadline - absl::Now()))));
      pollfd p{fd_, events, 0};
      int rc = poll(&p, 1, ms);
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
      if (absl::Now() >= deadline) return false;
    }
  };
  std::string frame = Frame(request);
  size_t off = 0;
  while (off < frame.size()) {
    if (!wait_for(POLLOUT)) return fail("timed out sending a request");
    ssize_t n = send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR && errno != EAGAIN) return fail(absl::StrCat("send: ", Errno(errno)));
    if (n > 0) off += static_cast<size_t>(n);
  }
  std::string in;
  auto read_n = [&](size_t want) -> absl::Status {
    char buf[65536];
    while (in.size() < want) {
      if (!wait_for(POLLIN)) return fail("no reply in time (server hung or network down)");
      ssize_t n = recv(fd_, buf, std::min(sizeof(buf), want - in.size()), 0);
      if (n == 0) return fail("the server closed the connection (did rank 0 exit?)");
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return fail(absl::StrCat("recv: ", Errno(errno)));
      }
      in.append(buf, static_cast<size_t>(n));
    }
    return absl::OkStatus();
  };
  GTP_RETURN_IF_ERROR(read_n(4));
  uint32_t len;
  std::memcpy(&len, in.data(), 4);
  if (len < 1 || len > kMaxFrame) return fail("malformed reply");
  GTP_RETURN_IF_ERROR(read_n(4 + len));
  return std::make_pair(static_cast<uint8_t>(in[4]), in.substr(5));
}

namespace {
absl::Status ReplyStatus(uint8_t code, const std::string& body, const std::string& where) {
  std::string msg = absl::StrCat("rendezvous store at ", where, ": ", body);
  switch (code) {
    case kOk: return absl::OkStatus();
    case kDeadline: return absl::DeadlineExceededError(msg);
    case kNotFound: return absl::NotFoundError(msg);
    case kInvalid: return absl::InvalidArgumentError(msg);
    default: return absl::InternalError(msg + " (unknown reply)");
  }
}
}  // namespace

absl::Status TcpStoreClient::Set(std::string_view key, std::string_view value,
                                 absl::Duration timeout) {
  std::string req(1, static_cast<char>(kSet));
  PutStr(&req, key);
  PutStr(&req, value);
  GTP_ASSIGN_OR_RETURN(auto r, Call(req, timeout));
  return ReplyStatus(r.first, r.second, where_);
}

absl::StatusOr<std::string> TcpStoreClient::Get(std::string_view key, absl::Duration timeout) {
  std::string req(1, static_cast<char>(kGet));
  PutStr(&req, key);
  PutI64(&req, ToMs(timeout));
  GTP_ASSIGN_OR_RETURN(auto r, Call(req, timeout));
  GTP_RETURN_IF_ERROR(ReplyStatus(r.first, r.second, where_));
  Reader rd{r.second};
  return rd.Str();
}

absl::StatusOr<std::string> TcpStoreClient::TryGet(std::string_view key, absl::Duration timeout) {
  std::string req(1, static_cast<char>(kTryGet));
  PutStr(&req, key);
  GTP_ASSIGN_OR_RETURN(auto r, Call(req, timeout));
  GTP_RETURN_IF_ERROR(ReplyStatus(r.first, r.second, where_));
  Reader rd{r.second};
  return rd.Str();
}

absl::StatusOr<int64_t> TcpStoreClient::Add(std::string_view key, int64_t delta,
                                            absl::Duration timeout) {
  std::string req(1, static_cast<char>(kAdd));
  PutStr(&req, key);
  PutI64(&req, delta);
  GTP_ASSIGN_OR_RETURN(auto r, Call(req, timeout));
  GTP_RETURN_IF_ERROR(ReplyStatus(r.first, r.second, where_));
  Reader rd{r.second};
  return rd.I64();
}

absl::Status TcpStoreClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  std::string req(1, static_cast<char>(kWait));
  PutU32(&req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) PutStr(&req, k);
  PutI64(&req, ToMs(timeout));
  GTP_ASSIGN_OR_RETURN(auto r, Call(req, timeout));
  return ReplyStatus(r.first, r.second, where_);
}

}  // namespace gtp::comm
