#include "tools/gtprun/launcher.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::gtprun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A temporary file that collects output.
class Capture {
 public:
  Capture() {
    std::string tmpl = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                                    "/capXXXXXX");
    fd_ = mkstemp(tmpl.data());
    unlink(tmpl.c_str());
  }
  ~Capture() { close(fd_); }
  int fd() const { return fd_; }
  std::string Read() const {
    std::string s;
    char buf[4096];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd_, buf, sizeof(buf), off)) > 0) {
      s.append(buf, n);
      off += n;
    }
    return s;
  }

 private:
  int fd_;
};

LaunchOptions Sh(int n, const std::string& script, Capture& out, Capture& err) {
  LaunchOptions o;
  o.nproc = n;
  o.command = {"/bin/sh", "-c", script};
  o.out_fd = out.fd();
  o.err_fd = err.fd();
  o.grace_period = absl::Milliseconds(500);
  return o;
}

TEST(Launch, SetsEnvironmentAndPrefixesLines) {
  Capture out, err;
  auto r = Launch(Sh(3,
                     "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT\"; "
                     "echo oops >&2; printf 'no newline'",
                     out, err));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code(), 0);
  EXPECT_FALSE(r->first_failure.has_value());
  EXPECT_GT(r->master_port, 0);
  std::string o = out.Read(), e = err.Read();
  for (int k = 0; k < 3; ++k) {
    EXPECT_THAT(o, HasSubstr(absl::StrCat("[rank ", k, "] env ", k, " 3 ", k, " 127.0.0.1 ",
                                          r->master_port, "\n")));
    EXPECT_THAT(o, HasSubstr(absl::StrCat("[rank ", k, "] no newline\n")));
    EXPECT_THAT(e, HasSubstr(absl::StrCat("[rank ", k, "] oops\n")));
  }
  // Every line carries a prefix.
  for (absl::string_view line : absl::StrSplit(o, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "[rank ")) << line;
  }
}

TEST(Launch, UsesTheGivenPortAndExtraEnv) {
  Capture out, err;
  LaunchOptions o = Sh(1, "echo $MASTER_PORT $FOO", out, err);
  o.master_port = 23456;
  o.extra_env = {{"FOO", "bar"}};
  auto r = Launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(out.Read(), HasSubstr("[rank 0] 23456 bar\n"));
}

// With a port of its choosing, gtprun binds it and hands the listening
// socket to rank 0 alone (GTP_STORE_FD): the port is held from the moment it
// is picked. Rank 0 finds the fd open and listening on MASTER_PORT (0.0.0.0,
// state 0A in /proc/net/tcp) after gtprun closed its own copy.
TEST(Launch, RankZeroInheritsTheListeningStoreSocket) {
  Capture out, err;
  auto r = Launch(Sh(2,
                     "echo \"fd=${GTP_STORE_FD:-none}\"; "
                     "if [ -n \"$GTP_STORE_FD\" ]; then "
                     "  readlink /proc/$$/fd/$GTP_STORE_FD | sed 's/:.*//'; "
                     "  grep -qi \": *[0-9]* *00000000:$(printf %04X $MASTER_PORT) 00000000:0000 0A\" "
                     "/proc/net/tcp && echo listening; fi",
                     out, err));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string o = out.Read();
  EXPECT_EQ(r->exit_code(), 0) << o << err.Read();
  EXPECT_THAT(o, HasSubstr("[rank 0] socket\n"));
  EXPECT_THAT(o, HasSubstr("[rank 0] listening\n"));
  EXPECT_THAT(o, Not(HasSubstr("[rank 0] fd=none")));
  EXPECT_THAT(o, HasSubstr("[rank 1] fd=none\n"));
}

// A given port is the ranks' to bind (no socket is passed), and a
// GTP_STORE_FD gtprun itself inherited is never passed on.
TEST(Launch, NoStoreSocketWithAGivenPortNorAnOuterOne) {
  Capture out, err;
  setenv("GTP_STORE_FD", "7", 1);
  LaunchOptions o = Sh(1, "echo \"fd=${GTP_STORE_FD:-none}\"", out, err);
  o.master_port = 23457;
  auto r = Launch(o);
  unsetenv("GTP_STORE_FD");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(out.Read(), HasSubstr("[rank 0] fd=none\n"));
}

// Machine 1 of 2 with 2 ranks each: global ranks 2 and 3 of 4, local 0 and 1.
TEST(Launch, SeveralMachinesNumberRanksByNode) {
  Capture out, err;
  LaunchOptions o = Sh(2, "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE\"; exit $((RANK == 3))", out, err);
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_port = 23457;
  o.stop_on_failure = false;
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string text = out.Read();
  EXPECT_THAT(text, HasSubstr("[rank 2] env 2 4 0 2\n"));
  EXPECT_THAT(text, HasSubstr("[rank 3] env 3 4 1 2\n"));
  ASSERT_TRUE(r->first_failure.has_value());
  EXPECT_EQ(r->ranks[*r->first_failure].rank, 3);  // the global rank is named
  EXPECT_THAT(err.Read(), HasSubstr("gtprun: FAILED: rank 3 exited with"));
  // Without a shared port the machines could not meet; a node_rank outside [0, nnodes) is refused.
  o.master_port = 0;
  EXPECT_THAT(std::string(Launch(o).status().message()), HasSubstr("--nnodes > 1 needs --master_port"));
  o.master_port = 23457;
  o.node_rank = 2;
  EXPECT_THAT(std::string(Launch(o).status().message()), HasSubstr("--node_rank must be in [0, --nnodes) = [0, 2), got 2"));
}

// Fewer GPUs than ranks: every rank gets its own NCCL host id and the socket
// transport on loopback; a variable the user set is kept (the host id gets the
// rank appended). As many GPUs as ranks: nothing NCCL is set.
TEST(Launch, RanksSharingAGpuLookLikeHostsOfTheirOwn) {
  for (const char* v : {"NCCL_HOSTID", "NCCL_NET", "NCCL_SOCKET_IFNAME", "NCCL_P2P_DISABLE",
                        "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE"}) {
    unsetenv(v);
  }
  Capture out, err;
  const char* script =
      "echo \"nccl ${NCCL_HOSTID:-none} ${NCCL_NET:-none} ${NCCL_SOCKET_IFNAME:-none} "
      "${NCCL_P2P_DISABLE:-none} ${NCCL_SHM_DISABLE:-none} ${NCCL_IB_DISABLE:-none} "
      "${NCCL_NVLS_ENABLE:-none}\"";
  LaunchOptions o = Sh(3, script, out, err);
  o.master_port = 23457;
  o.gpus = 1;
  o.extra_env = {{"NCCL_SOCKET_IFNAME", "eth0"}};
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code(), 0);
  std::string got = out.Read();
  for (int k = 0; k < 3; ++k) {
    EXPECT_THAT(got, HasSubstr(absl::StrCat("[rank ", k, "] nccl gtprun-23457-rank", k,
                                            " Socket eth0 1 1 1 0\n")));
  }

  Capture out2, err2;
  o = Sh(2, script, out2, err2);
  o.gpus = 2;
  r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int k = 0; k < 2; ++k) {
    EXPECT_THAT(out2.Read(), HasSubstr(absl::StrCat("[rank ", k, "] nccl none none none none none none none\n")));
  }
  EXPECT_TRUE(SharesGpus(4, 1));
  EXPECT_TRUE(SharesGpus(8, 2));
  EXPECT_FALSE(SharesGpus(2, 2));
  EXPECT_FALSE(SharesGpus(4, 0));  // no GPU: CPU ranks, nothing to share
}

TEST(CountGpus, ReadsCudaVisibleDevices) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string keep = old ? old : "";
  setenv("CUDA_VISIBLE_DEVICES", "0,3, 5", 1);
  EXPECT_EQ(CountGpus(), 3);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_EQ(CountGpus(), 0);
  if (old) setenv("CUDA_VISIBLE_DEVICES", keep.c_str(), 1); else unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(Launch, FailedRankStopsTheOthers) {
  Capture out, err;
  absl::Time t0 = absl::Now();
  auto r = Launch(Sh(3, "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; sleep 30", out, err));
  absl::Duration took = absl::Now() - t0;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->first_failure.has_value());
  EXPECT_EQ(*r->first_failure, 1);
  EXPECT_EQ(r->exit_code(), 3);
  EXPECT_TRUE(r->ranks[0].stopped);
  EXPECT_TRUE(r->ranks[2].stopped);
  EXPECT_LT(took, absl::Seconds(5));
  std::string e = err.Read();
  EXPECT_THAT(e, HasSubstr("rank 1 (pid"));
  EXPECT_THAT(e, HasSubstr("failed with exit status 3; stopping the other ranks"));
  EXPECT_THAT(e, HasSubstr("FAILED: rank 1 exited with exit status 3"));
}

TEST(Launch, KillsRanksThatIgnoreSigterm) {
  Capture out, err;
  absl::Time t0 = absl::Now();
  auto r = Launch(Sh(2, "if [ $RANK = 0 ]; then sleep 0.3; exit 5; fi; trap '' TERM; sleep 30", out, err));
  absl::Duration took = absl::Now() - t0;
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code(), 5);
  EXPECT_TRUE(r->ranks[1].signaled);
  EXPECT_EQ(r->ranks[1].status, SIGKILL);
  EXPECT_GE(took, absl::Milliseconds(450));
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_THAT(err.Read(), HasSubstr("sending SIGKILL"));
}

TEST(Launch, ReportsASignalDeath) {
  Capture out, err;
  auto r = Launch(Sh(2, "if [ $RANK = 1 ]; then kill -SEGV $$; fi; sleep 30", out, err));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->first_failure, 1);
  EXPECT_EQ(r->exit_code(), 128 + SIGSEGV);
  EXPECT_THAT(err.Read(), HasSubstr("signal 11 (Segmentation fault)"));
}

TEST(Launch, WithoutStopOnFailureOthersFinish) {
  Capture out, err;
  LaunchOptions o = Sh(2, "if [ $RANK = 0 ]; then exit 2; fi; sleep 0.3; echo done", out, err);
  o.stop_on_failure = false;
  auto r = Launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code(), 2);
  EXPECT_TRUE(r->ranks[1].ok());
  EXPECT_THAT(out.Read(), HasSubstr("[rank 1] done"));
}

// A rank stopped by SIGSTOP never ends on its own: with stop_on_failure
// off gtprun waited for it forever (issue 29, item 13). It is named when it
// stops, killed once every other rank has ended, and the FAILED line says
// the survivors' failure came with a stopped peer.
TEST(Launch, AStoppedRankIsNamedAndEndedOnceTheOthersAreDone) {
  Capture out, err;
  LaunchOptions o = Sh(
      3, "if [ $RANK = 1 ]; then kill -STOP $$; fi; sleep 0.3; if [ $RANK = 0 ]; then exit 3; fi",
      out, err);
  o.stop_on_failure = false;
  const absl::Time t0 = absl::Now();
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  const std::string e = err.Read();
  EXPECT_THAT(e, HasSubstr("gtprun: rank 1 (pid "));
  EXPECT_THAT(e, HasSubstr(") was stopped by signal 19"));
  EXPECT_THAT(e, HasSubstr("gtprun: rank 1 is stopped and every other rank has ended; sending SIGKILL"));
  EXPECT_THAT(e, HasSubstr("gtprun: FAILED: rank 0 exited with exit status 3 (rank(s) 1 had been "
                           "stopped by a signal"));
  EXPECT_EQ(r->suspended, std::vector<int>{1});
  EXPECT_EQ(r->exit_code(), 3);
  EXPECT_TRUE(r->ranks[2].ok());
  EXPECT_TRUE(r->ranks[1].signaled);
}

// Ports outside [0, 65535] and a negative grace period were passed on
// unchecked (gtprun --master_port 70000 -- /bin/true exited 0).
TEST(CheckOptions, RefusesPortsOutsideTcpAndNegativeGrace) {
  LaunchOptions o;
  o.command = {"/bin/true"};
  EXPECT_TRUE(CheckOptions(o).ok());
  for (int port : {70000, 65536, -1}) {
    o.master_port = port;
    const absl::Status st = CheckOptions(o);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << port;
    EXPECT_THAT(
        std::string(st.message()),
        HasSubstr(absl::StrCat(
            "--master_port must be a TCP port in [1, 65535] (0 picks a free one), got ", port)));
    EXPECT_FALSE(Launch(o).ok()) << port;
  }
  o.master_port = 65535;
  EXPECT_TRUE(CheckOptions(o).ok());
  o.grace_period = absl::Seconds(-5);
  EXPECT_THAT(std::string(CheckOptions(o).message()),
              HasSubstr("--grace_period must be a duration >= 0 (e.g. 5s), got -5s"));
  o.grace_period = absl::ZeroDuration();
  EXPECT_TRUE(CheckOptions(o).ok());
}

TEST(Launch, MissingProgramIsAnError) {
  LaunchOptions o;
  o.command = {"/nonexistent/prog"};
  EXPECT_EQ(Launch(o).status().code(), absl::StatusCode::kNotFound);
  o.command = {"no-such-program-in-path-xyz"};
  EXPECT_THAT(std::string(Launch(o).status().message()), HasSubstr("not found in PATH"));
}

// ---- the binary ------------------------------------------------------------------

std::string Gtprun() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/gtp/tools/gtprun/gtprun");
}

// Runs a shell command line; returns (exit code, stdout+stderr).
std::pair<int, std::string> Shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) s.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, s};
}

TEST(GtprunBinary, RunsRanksAndExitsWithTheFailedRanksCode) {
  auto [code, out] = Shell(Gtprun() + " --nproc 2 -- /bin/sh -c 'echo hi from $RANK'");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("[rank 0] hi from 0"));
  EXPECT_THAT(out, HasSubstr("[rank 1] hi from 1"));
  EXPECT_THAT(out, HasSubstr("gtprun: 2 rank(s)"));

  std::tie(code, out) = Shell(Gtprun() +
                              " --nproc 3 --grace_period=200ms -- /bin/sh -c "
                              "'if [ $RANK = 2 ]; then exit 7; fi; sleep 30'");
  EXPECT_EQ(code, 7) << out;
  EXPECT_THAT(out, HasSubstr("FAILED: rank 2 exited with exit status 7"));
}

TEST(GtprunBinary, UsageErrors) {
  auto [code, out] = Shell(Gtprun() + " --nproc 2");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("no program given"));
  std::tie(code, out) = Shell(Gtprun() + " --nproc 0 -- /bin/true");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("--nproc must be >= 1"));
  // Refused before the banner and before any rank starts.
  std::tie(code, out) = Shell(Gtprun() + " --nproc 2 --master_port 70000 -- /bin/echo started");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("--master_port must be a TCP port in [1, 65535]"));
  EXPECT_THAT(out, Not(HasSubstr("started")));
  EXPECT_THAT(out, Not(HasSubstr("rank(s)")));
  std::tie(code, out) = Shell(Gtprun() + " --nproc 2 --grace_period=-5s -- /bin/true");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("--grace_period must be a duration >= 0"));
}

TEST(GtprunBinary, ForwardsSigterm) {
  // gtprun in the background; SIGTERM to it reaches the ranks.
  auto [code, out] = Shell(
      "( " + Gtprun() + " --nproc 2 -- /bin/sh -c 'trap \"echo got term; exit 0\" TERM; "
      "sleep 30 & wait' & pid=$!; sleep 0.5; kill -TERM $pid; wait $pid; echo rc=$? )");
  EXPECT_THAT(out, HasSubstr("forwarding it to all ranks"));
  EXPECT_THAT(out, HasSubstr("[rank 0] got term"));
  EXPECT_THAT(out, HasSubstr("rc=143"));
}

TEST(GtprunBinary, ForwardsSighupAsSigterm) {
  // The ranks used to ignore a forwarded SIGHUP (UCX's debug handler caught
  // it) and were SIGKILLed after the grace period, losing their work.
  auto [code, out] = Shell(
      "( " + Gtprun() + " --nproc 2 -- /bin/sh -c 'trap \"echo got term; exit 0\" TERM; "
      "trap \"echo got hup; exit 0\" HUP; sleep 30 & wait' & pid=$!; sleep 0.5; "
      "kill -HUP $pid; wait $pid; echo rc=$? )");
  EXPECT_THAT(out, HasSubstr("forwarding SIGTERM to all ranks"));
  EXPECT_THAT(out, HasSubstr("[rank 0] got term"));
  EXPECT_THAT(out, HasSubstr("[rank 1] got term"));
  EXPECT_THAT(out, Not(HasSubstr("] got hup")));
}

TEST(GtprunBinary, RanksGetSigtermWhenGtprunIsKilled) {
  // kill -9 of gtprun used to leave the ranks training unattended.
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/orphans";
  auto [code, out] = Shell(
      "mkdir -p " + dir + "; ( " + Gtprun() + " --nproc 2 -- /bin/sh -c 'trap \"echo term > " + dir +
      "/rank$RANK; exit 0\" TERM; sleep 30 & wait' & pid=$!; sleep 0.5; kill -KILL $pid; "
      "sleep 1.5; ls " + dir + " )");
  EXPECT_THAT(out, HasSubstr("rank0"));
  EXPECT_THAT(out, HasSubstr("rank1"));
}

TEST(GtprunBinary, AnExecFailureSaysWhy) {
  const std::string bad = std::string(std::getenv("TEST_TMPDIR")) + "/not_a_program";
  auto [code, out] = Shell("printf 'garbage' > " + bad + "; chmod +x " + bad + "; " + Gtprun() +
                           " --nproc 1 -- " + bad);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("gtprun: cannot execute " + bad + ": Exec format error"));
}

}  // namespace
}  // namespace gtp::gtprun
