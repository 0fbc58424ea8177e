#include "comm/testing/multiprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace gtp::comm::testing {

bool IsRankProcess() { return std::getenv("RANK") != nullptr; }

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string GtprunPath() {
  if (const char* p = std::getenv("GTPRUN")) return p;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    return absl::StrCat(srcdir, "/gtp/tools/gtprun/gtprun");
  }
  // Bundled for the GPU machine (tools/gpu.sh): beside this binary.
  std::string self = SelfPath();
  std::string dir = self.substr(0, self.rfind('/') + 1);
  for (const char* name : {"tools_gtprun_gtprun", "gtprun"}) {
    if (access((dir + name).c_str(), X_OK) == 0) return dir + name;
  }
  return "gtprun";
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env,
                         absl::Duration limit) {
  std::map<std::string, std::string> e;
  for (char** p = environ; p && *p; ++p) {
    const char* eq = std::strchr(*p, '=');
    if (eq) e[std::string(*p, eq - *p)] = eq + 1;
  }
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT"}) {
    e.erase(k);
  }
  for (const auto& [k, v] : env) e[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : e) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  CommandResult result;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return result;
  absl::Time t0 = absl::Now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(pipefd[1]);
  absl::Time deadline = t0 + limit;
  char buf[65536];
  for (;;) {
    int ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd p{pipefd[0], POLLIN, 0};
    int rc = poll(&p, 1, ms);
    if (rc == 0) {
      kill(-pid, SIGKILL);
      result.output += "\n[RunCommand: killed after the time limit]\n";
      break;
    }
    if (rc < 0 && errno == EINTR) continue;
    ssize_t n = read(pipefd[0], buf, sizeof(buf));
    if (n <= 0) break;
    result.output.append(buf, n);
  }
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.elapsed = absl::Now() - t0;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace gtp::comm::testing
