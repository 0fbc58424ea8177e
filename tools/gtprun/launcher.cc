#include "tools/gtprun/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"

extern char** environ;

namespace gtp::gtprun {
namespace {

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Resolves `prog` like execvp would, in the parent (PATH search is not
// async-signal-safe).
absl::StatusOr<std::string> Resolve(const std::string& prog) {
  if (prog.find('/') != std::string::npos) {
    if (access(prog.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("gtprun: cannot execute '", prog, "': ", std::strerror(errno)));
    }
    return prog;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string cand = absl::StrCat(dir.empty() ? "." : dir, "/", prog);
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) {
      return cand;
    }
  }
  return absl::NotFoundError(absl::StrCat("gtprun: '", prog, "' not found in PATH"));
}

// One output stream of one rank: buffers partial lines.
struct Stream {
  int fd = -1;  // read end; -1 once closed
  int sink = 1;
  std::string prefix;
  std::string partial;

  void Emit(const char* data, size_t n) {
    partial.append(data, n);
    size_t start = 0, nl;
    std::string out;
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      absl::StrAppend(&out, prefix, absl::string_view(partial.data() + start, nl - start + 1));
      start = nl + 1;
    }
    partial.erase(0, start);
    if (!out.empty()) WriteAll(sink, out);
  }
  void Close() {
    if (!partial.empty()) WriteAll(sink, absl::StrCat(prefix, partial, "\n"));
    partial.clear();
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

}  // namespace

std::string RankExit::Describe() const {
  if (!signaled) return absl::StrCat("exit status ", status);
  return absl::StrCat("signal ", status, " (", strsignal(status), ")");
}

int LaunchResult::exit_code() const {
  if (interrupted_by != 0) return 128 + interrupted_by;
  if (!first_failure.has_value()) return 0;
  const RankExit& r = ranks[*first_failure];
  return r.signaled ? 128 + r.status : r.status;
}

int CountGpus() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    int n = 0;
    for (absl::string_view d : absl::StrSplit(v, ',')) n += !absl::StripAsciiWhitespace(d).empty();
    return n;
  }
  int n = 0;
  if (DIR* d = opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

std::vector<std::pair<std::string, std::string>> SharedGpuEnv(
    const std::map<std::string, std::string>& env, int rank, const std::string& run_id) {
  std::vector<std::pair<std::string, std::string>> out;
  auto it = env.find("NCCL_HOSTID");
  out.emplace_back("NCCL_HOSTID", absl::StrCat(it != env.end() ? it->second : "gtprun-" + run_id,
                                               "-rank", rank));
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}, {"NCCL_IB_DISABLE", "1"},
           {"NCCL_NET", "Socket"}, {"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_NVLS_ENABLE", "0"}}) {
    if (env.find(k) == env.end()) out.emplace_back(k, v);
  }
  return out;
}

absl::StatusOr<ListeningSocket> ListenOnFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("gtprun: socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("gtprun: cannot listen on a free port: ", std::strerror(e)));
  }
  return ListeningSocket{fd, static_cast<int>(ntohs(a.sin_port))};
}

absl::Status CheckOptions(const LaunchOptions& o) {
  if (o.nproc < 1) return absl::InvalidArgumentError(absl::StrCat("gtprun: --nproc must be >= 1, got ", o.nproc));
  if (o.command.empty()) return absl::InvalidArgumentError("gtprun: no command given");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("gtprun: --node_rank must be in [0, --nnodes) = [0, ", o.nnodes,
                                                   "), got ", o.node_rank));
  }
  // (70000 and -1 were passed on to the ranks, which failed on them one by one.)
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gtprun: --master_port must be a TCP port in [1, 65535] (0 picks a free one), got ",
        o.master_port));
  }
  if (o.nnodes > 1 && o.master_port == 0) {
    return absl::InvalidArgumentError(
        "gtprun: --nnodes > 1 needs --master_port (the same port on every machine; node 0 listens on it)");
  }
  // (A negative period killed the other ranks at once, without their SIGTERM grace.)
  if (o.grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gtprun: --grace_period must be a duration >= 0 (e.g. 5s), got ",
                     absl::FormatDuration(o.grace_period)));
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& o) {
  if (absl::Status st = CheckOptions(o); !st.ok()) return st;
  const int first_rank = o.node_rank * o.nproc;  // this machine's first global rank
  auto prog = Resolve(o.command[0]);
  if (!prog.ok()) return prog.status();
  LaunchResult result;
  result.master_port = o.master_port;
  // With a port of its choosing gtprun holds the store's socket until rank 0
  // (global rank 0 is on this machine: --nnodes 1) inherits it.
  int store_fd = -1;
  if (result.master_port == 0) {
    auto l = ListenOnFreePort();
    if (!l.ok()) return l.status();
    store_fd = l->fd;
    result.master_port = l->port;
  }
  struct CloseStoreFd {
    int& fd;
    ~CloseStoreFd() {
      if (fd >= 0) close(fd);
    }
  } close_store_fd{store_fd};

  // Environment: inherited, minus what we set.
  std::map<std::string, std::string> base;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) base[std::string(*e, eq - *e)] = eq + 1;
  }
  base.erase("GTP_STORE_FD");  // an outer launcher's: never ours to pass on
  base["WORLD_SIZE"] = absl::StrCat(o.nnodes * o.nproc);
  base["LOCAL_WORLD_SIZE"] = absl::StrCat(o.nproc);
  base["MASTER_ADDR"] = o.master_addr;
  base["MASTER_PORT"] = absl::StrCat(result.master_port);
  for (const auto& [k, v] : o.extra_env) base[k] = v;
  const int gpus = o.gpus >= 0 ? o.gpus : CountGpus();

  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  result.ranks.resize(o.nproc);
  std::vector<Stream> streams(2 * o.nproc);
  std::vector<bool> alive(o.nproc, false);
  // The signal that stopped a rank (SIGSTOP, SIGTSTP…), 0 while it runs: a
  // stopped rank never ends on its own, so its peers time out and gtprun
  // must end it once nothing else is left.
  std::vector<int> suspended(o.nproc, 0);
  std::vector<bool> term_sent(o.nproc, false);

  auto stop_all = [&](int sig) {
    for (int r = 0; r < o.nproc; ++r) {
      if (alive[r]) {
        kill(-result.ranks[r].pid, sig);
        if (sig == SIGTERM || sig == SIGKILL) term_sent[r] = true;
      }
    }
  };

  for (int r = 0; r < o.nproc; ++r) {
    std::map<std::string, std::string> env = base;
    env["RANK"] = absl::StrCat(first_rank + r);
    env["LOCAL_RANK"] = absl::StrCat(r);
    const bool gets_store_fd = store_fd >= 0 && first_rank + r == 0;
    if (gets_store_fd) env["GTP_STORE_FD"] = absl::StrCat(store_fd);
    if (SharesGpus(o.nproc, gpus)) {
      for (const auto& [k, v] : SharedGpuEnv(base, first_rank + r, absl::StrCat(result.master_port))) env[k] = v;
    }
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      stop_all(SIGKILL);
      return absl::UnavailableError(absl::StrCat("gtprun: pipe: ", std::strerror(errno)));
    }
    const pid_t parent = getpid();
    // The reason an exec fails, prepared here: the child only writes it.
    const std::string exec_failed =
        absl::StrCat("gtprun: cannot execute ", *prog, ": ");
    pid_t pid = fork();
    if (pid < 0) {
      stop_all(SIGKILL);
      return absl::UnavailableError(absl::StrCat("gtprun: fork: ", std::strerror(errno)));
    }
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      setpgid(0, 0);
      // A rank outlives no launcher: gtprun killed (even by SIGKILL) makes
      // its ranks stop as for SIGTERM — at their next step, with a checkpoint.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(128 + SIGTERM);  // it died before prctl
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGPIPE, SIG_DFL);
      dup2(out[1], 1);
      dup2(err[1], 2);
      if (gets_store_fd) fcntl(store_fd, F_SETFD, 0);  // rank 0 inherits it across exec
      execve(prog->c_str(), argv.data(), envp.data());
      const int err = errno;
      const char* why = err == ENOENT    ? "No such file or directory"
                        : err == EACCES  ? "Permission denied (not executable?)"
                        : err == ENOEXEC ? "Exec format error (not a binary or script?)"
                        : err == E2BIG   ? "Argument list too long"
                        : err == ENOMEM  ? "Out of memory"
                                         : "exec failed";
      (void)!write(2, exec_failed.data(), exec_failed.size());
      (void)!write(2, why, std::strlen(why));
      (void)!write(2, "\n", 1);
      _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    if (gets_store_fd) {  // rank 0 holds it now
      close(store_fd);
      store_fd = -1;
    }
    result.ranks[r].rank = first_rank + r;
    result.ranks[r].pid = pid;
    alive[r] = true;
    std::string prefix = absl::StrCat("[rank ", first_rank + r, "] ");
    streams[2 * r] = Stream{out[0], o.out_fd, prefix, ""};
    streams[2 * r + 1] = Stream{err[0], o.err_fd, prefix, ""};
  }

  absl::Time kill_at = absl::InfiniteFuture();
  absl::Time drain_until = absl::InfiniteFuture();
  int n_alive = o.nproc;
  std::vector<pollfd> fds;
  std::vector<int> which;
  char buf[65536];
  for (;;) {
    fds.clear();
    which.clear();
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i].fd >= 0) {
        fds.push_back({streams[i].fd, POLLIN, 0});
        which.push_back(static_cast<int>(i));
      }
    }
    if (n_alive == 0 && fds.empty()) break;
    if (n_alive == 0 && absl::Now() >= drain_until) break;  // grandchildren hold pipes open
    if (o.signal_fd >= 0) {
      fds.push_back({o.signal_fd, POLLIN, 0});
      which.push_back(-1);
    }
    int rc = poll(fds.data(), fds.size(), 20);
    if (rc < 0 && errno != EINTR) break;
    for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (which[i] < 0) {
        signalfd_siginfo si;
        if (read(o.signal_fd, &si, sizeof(si)) == sizeof(si)) {
          int sig = static_cast<int>(si.ssi_signo);
          // SIGHUP goes on as SIGTERM: UCX keeps SIGHUP for a debug dump,
          // so ranks would ignore it and be killed after the grace period.
          const int fwd = sig == SIGHUP ? SIGTERM : sig;
          WriteAll(o.err_fd, absl::StrCat("gtprun: got signal ", sig, " (", strsignal(sig),
                                          "); forwarding ",
                                          fwd == sig ? "it" : "SIGTERM", " to all ranks\n"));
          if (result.interrupted_by == 0) result.interrupted_by = sig;
          stop_all(fwd);
          kill_at = std::min(kill_at, absl::Now() + o.grace_period);
        }
        continue;
      }
      Stream& s = streams[which[i]];
      ssize_t n = read(s.fd, buf, sizeof(buf));
      if (n > 0) s.Emit(buf, static_cast<size_t>(n));
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) s.Close();
    }
    for (int r = 0; r < o.nproc; ++r) {
      if (!alive[r]) continue;
      int status = 0;
      pid_t w = waitpid(result.ranks[r].pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (w != result.ranks[r].pid) continue;
      if (WIFSTOPPED(status)) {
        suspended[r] = WSTOPSIG(status);
        WriteAll(o.err_fd, absl::StrCat("gtprun: rank ", result.ranks[r].rank, " (pid ", w,
                                        ") was stopped by signal ", suspended[r], " (",
                                        strsignal(suspended[r]),
                                        "): it cannot go on until it gets SIGCONT\n"));
        if (std::find(result.suspended.begin(), result.suspended.end(), result.ranks[r].rank) ==
            result.suspended.end()) {
          result.suspended.push_back(result.ranks[r].rank);
        }
        continue;
      }
      if (WIFCONTINUED(status)) {
        suspended[r] = 0;
        WriteAll(o.err_fd, absl::StrCat("gtprun: rank ", result.ranks[r].rank, " (pid ", w,
                                        ") continued\n"));
        continue;
      }
      alive[r] = false;
      suspended[r] = 0;
      --n_alive;
      RankExit& x = result.ranks[r];
      x.signaled = WIFSIGNALED(status);
      x.status = x.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
      x.stopped = term_sent[r];
      // Kill the rest of its process group (daemons it left behind).
      kill(-x.pid, SIGKILL);
      if (!x.ok() && !x.stopped && !result.first_failure.has_value() && result.interrupted_by == 0) {
        result.first_failure = r;
        WriteAll(o.err_fd, absl::StrCat("gtprun: rank ", x.rank, " (pid ", x.pid, ") failed with ",
                                        x.Describe(),
                                        o.stop_on_failure && n_alive > 0 ? "; stopping the other ranks" : "",
                                        "\n"));
        if (o.stop_on_failure) {
          stop_all(SIGTERM);
          kill_at = absl::Now() + o.grace_period;
        }
      }
      if (n_alive == 0) drain_until = absl::Now() + absl::Seconds(1);
    }
    // Only stopped ranks left after others ended: nothing can end them but
    // gtprun (their peers are gone), so they are killed (not counted as
    // stopped by gtprun: a stopped rank is a failure).
    if (n_alive > 0 && n_alive < o.nproc) {
      bool only_suspended = true;
      for (int r = 0; r < o.nproc; ++r) only_suspended &= !alive[r] || suspended[r] != 0;
      if (only_suspended) {
        for (int r = 0; r < o.nproc; ++r) {
          if (!alive[r] || term_sent[r]) continue;
          WriteAll(o.err_fd, absl::StrCat("gtprun: rank ", result.ranks[r].rank,
                                          " is stopped and every other rank has ended; "
                                          "sending SIGKILL\n"));
          kill(-result.ranks[r].pid, SIGKILL);
          suspended[r] = 0;  // once: its exit is reaped above
        }
      }
    }
    if (n_alive > 0 && absl::Now() >= kill_at) {
      WriteAll(o.err_fd, absl::StrCat("gtprun: ranks still running after the ",
                                      absl::FormatDuration(o.grace_period),
                                      " grace period; sending SIGKILL\n"));
      stop_all(SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
  for (auto& s : streams) s.Close();
  if (result.first_failure.has_value()) {
    const RankExit& f = result.ranks[*result.first_failure];
    std::string stopped;
    for (int r : result.suspended) {
      if (r != f.rank) absl::StrAppend(&stopped, stopped.empty() ? "" : ", ", r);
    }
    WriteAll(o.err_fd,
             absl::StrCat("gtprun: FAILED: rank ", f.rank, " exited with ", f.Describe(),
                          stopped.empty() ? ""
                                          : absl::StrCat(" (rank(s) ", stopped,
                                                         " had been stopped by a signal: "
                                                         "their peers could not go on)"),
                          "\n"));
  }
  return result;
}

}  // namespace gtp::gtprun
