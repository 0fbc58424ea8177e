#include "comm/env/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::comm {
namespace {

absl::StatusOr<int> Int(const EnvLookup& env, const std::string& name, const std::string& hint) {
  std::optional<std::string> v = env(name);
  if (!v.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("launch environment: ", name, " is not set", hint));
  }
  int out = 0;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch environment: ", name, "='", *v, "' is not an integer"));
  }
  return out;
}

}  // namespace

std::string LaunchEnv::ToString() const {
  return absl::StrCat("rank ", rank, "/", world_size, " (local ", local_rank, ") master ",
                      master_addr, ":", master_port, " via ", source);
}

std::string FirstSlurmHost(const std::string& list) {
  // Up to the first top-level comma; expand the first element of a bracket.
  std::string first;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  size_t lb = first.find('[');
  if (lb == std::string::npos) return first;
  std::string prefix = first.substr(0, lb);
  std::string inner = first.substr(lb + 1, first.find(']') - lb - 1);
  std::string range = inner.substr(0, inner.find(','));
  return prefix + range.substr(0, range.find('-'));
}

absl::StatusOr<LaunchEnv> ReadLaunchEnv(const EnvLookup& env) {
  LaunchEnv e;
  const std::string hint = " (launch with gtprun, torchrun-style variables or srun)";
  if (env("RANK").has_value() || !env("SLURM_PROCID").has_value()) {
    e.source = "torchrun";
    GTP_ASSIGN_OR_RETURN(e.rank, Int(env, "RANK", hint));
    GTP_ASSIGN_OR_RETURN(e.world_size, Int(env, "WORLD_SIZE", hint));
    GTP_ASSIGN_OR_RETURN(e.local_rank, Int(env, "LOCAL_RANK", hint));
  } else {
    e.source = "slurm";
    GTP_ASSIGN_OR_RETURN(e.rank, Int(env, "SLURM_PROCID", hint));
    GTP_ASSIGN_OR_RETURN(e.world_size, Int(env, "SLURM_NTASKS", hint));
    GTP_ASSIGN_OR_RETURN(e.local_rank, Int(env, "SLURM_LOCALID", hint));
  }
  const char* rank_name = e.source == "slurm" ? "SLURM_PROCID" : "RANK";
  const char* size_name = e.source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE";
  if (e.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch environment: ", size_name, "=", e.world_size, " must be >= 1"));
  }
  if (e.rank < 0 || e.rank >= e.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("launch environment: ", rank_name, "=", e.rank,
                                                   " must be in [0, ", size_name, "=",
                                                   e.world_size, ")"));
  }
  if (e.local_rank < 0 || e.local_rank >= e.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("launch environment: local rank ", e.local_rank,
                                                   " must be in [0, ", e.world_size, ")"));
  }

  if (auto addr = env("MASTER_ADDR"); addr.has_value() && !addr->empty()) {
    e.master_addr = *addr;
  } else if (e.source == "slurm") {
    std::optional<std::string> list = env("SLURM_STEP_NODELIST");
    if (!list.has_value()) list = env("SLURM_JOB_NODELIST");
    if (!list.has_value() || list->empty()) {
      return absl::InvalidArgumentError(
          "launch environment: MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST nor "
          "SLURM_JOB_NODELIST");
    }
    e.master_addr = FirstSlurmHost(*list);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("launch environment: MASTER_ADDR is not set", hint));
  }

  if (env("MASTER_PORT").has_value() || e.source != "slurm") {
    GTP_ASSIGN_OR_RETURN(e.master_port, Int(env, "MASTER_PORT", hint));
  } else {
    int job = 0;
    if (auto j = env("SLURM_JOB_ID"); j.has_value()) (void)absl::SimpleAtoi(*j, &job);
    e.master_port = 29500 + (job % 1000 + 1000) % 1000;
  }
  if (e.master_port < 1 || e.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch environment: MASTER_PORT=", e.master_port, " is not in [1, 65535]"));
  }
  if (env("GTP_STORE_FD").has_value()) {
    GTP_ASSIGN_OR_RETURN(e.store_fd, Int(env, "GTP_STORE_FD", hint));
    if (e.store_fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("launch environment: GTP_STORE_FD=", e.store_fd, " is not a file descriptor"));
    }
    if (e.rank != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launch environment: GTP_STORE_FD is set for ", rank_name, "=", e.rank,
          "; only rank 0 serves the rendezvous store (gtprun passes it to rank 0 alone)"));
    }
  }
  return e;
}

absl::StatusOr<LaunchEnv> ReadLaunchEnv() {
  return ReadLaunchEnv([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace gtp::comm
