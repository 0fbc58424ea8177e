#include "recipes/trainer/metrics.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/mfu.h"

namespace gtp::recipes {

std::string FormatBytes(int64_t b) {
  if (b >= (1 << 30)) return absl::StrFormat("%.2f GiB", b / double(1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / double(1 << 20));
  return absl::StrFormat("%.1f KiB", b / 1024.0);
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Open(const proto::Recipe& r,
                                                       const RunOptions& options) {
  return Open(r, options, RecipeText(r), "recipe.pbtxt");
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Open(const proto::Recipe& r,
                                                       const RunOptions& options,
                                                       const std::string& config_text,
                                                       const std::string& config_file) {
  std::unique_ptr<Metrics> m(new Metrics(r, options));
  m->path_ = options.run_dir + "/metrics.jsonl";
  GTP_RETURN_IF_ERROR(m->Append(""));  // writable?
  // The resolved recipe (defaults filled in, every --set applied), readable
  // and reusable: `--config <run dir>/recipe.pbtxt` runs the same recipe.
  {
    const std::string path = options.run_dir + "/" + config_file, tmp = path + ".tmp";
    std::ofstream f(tmp, std::ios::trunc);
    f << "# The recipe of this run, as resolved (defaults filled in, every --set applied).\n"
      << config_text;
    f.close();
    std::error_code ec;
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    std::filesystem::rename(tmp, path, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  }
  if (!r.train().tensorboard_dir().empty()) {
    std::filesystem::path dir(r.train().tensorboard_dir());
    if (dir.is_relative()) dir = std::filesystem::path(options.run_dir) / dir;
    GTP_ASSIGN_OR_RETURN(tensorboard::EventWriter w, tensorboard::EventWriter::Open(dir.string()));
    // The resolved recipe beside the curves (TensorBoard's Text tab), as a
    // markdown code block, at step 0 (a resumed run's file repeats it).
    GTP_RETURN_IF_ERROR(w.WriteText(0, "recipe", absl::StrCat("```\n", config_text, "```\n")));
    m->tb_ = std::move(w);
  }
  return m;
}

absl::Status Metrics::Step(const StepRecord& rec, const AllocatorStats& mem, int world_size,
                         std::chrono::steady_clock::time_point t_start, int64_t first_step) {
  if (options_.on_step) options_.on_step(rec);
  const int64_t steps = r_.train().steps();
  const bool has_moe = r_.model().moe().num_experts() > 0;
  // MFU per GPU by the PaLM/nanoGPT convention (recipes/trainer/mfu.h).
  std::string mfu;
  double mfu_fraction = -1;  // none without a peak
  if (const double peak = PeakFlops(r_.train()); peak > 0) {
    const double flop_per_token = TrainingFlopPerToken(ShapeOf(r_.model()));
    mfu_fraction = Mfu(flop_per_token, rec.tokens_per_s / world_size, peak);
    mfu = absl::StrFormat("  MFU %.1f%%", 100 * mfu_fraction);
  }
  interval_ms_ += rec.ms;
  interval_tokens_ += rec.tokens_per_s * rec.ms / 1e3;
  ++interval_steps_;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const double eta = elapsed / (rec.step - first_step) * (steps - rec.step);
  if (options_.progress_bar) {
    const int width = 30, done = static_cast<int>(width * rec.step / steps);
    std::printf("\r[%s%s] %lld/%lld loss %.4f lr %.2e %.0f tok/s ETA %.0fs   ",
                std::string(done, '#').c_str(), std::string(width - done, '.').c_str(),
                static_cast<long long>(rec.step), static_cast<long long>(steps), rec.loss, rec.lr,
                rec.tokens_per_s, eta);
  } else if (rec.step % r_.train().log_every() == 0 || rec.step == steps || rec.step == 1) {
    std::string moe;
    if (has_moe) {
      moe = absl::StrFormat("  moe tokens/expert %.0f/%.0f/%.0f dropped %.0f aux %.4f z %.4f",
                            rec.moe.tokens_min, rec.moe.tokens_mean, rec.moe.tokens_max,
                            rec.moe.dropped, rec.moe.aux_loss, rec.moe.z_loss);
    }
    if (rec.bubble >= 0) moe += absl::StrFormat("  bubble %.1f%%", 100 * rec.bubble);
    // Speed over the steps since the last line (MFU likewise).
    const double avg_ms = interval_ms_ / interval_steps_;
    const double avg_tok_s = interval_ms_ > 0 ? interval_tokens_ / (interval_ms_ / 1e3) : rec.tokens_per_s;
    if (const double peak = PeakFlops(r_.train()); peak > 0) {
      mfu = absl::StrFormat("  MFU %.1f%%",
                            100 * Mfu(TrainingFlopPerToken(ShapeOf(r_.model())), avg_tok_s / world_size, peak));
    }
    const std::string over = interval_steps_ > 1 ? absl::StrFormat(" (avg of %d)", interval_steps_) : "";
    interval_ms_ = interval_tokens_ = 0;
    interval_steps_ = 0;
    std::printf("step %5lld/%lld  loss %.4f  lr %.2e  grad-norm %.3f  %.0f tok/s  %.1f ms/step%s"
                "  comm %.1f ms%s%s  mem %s (peak %s)%s  ETA %.0fs\n",
                static_cast<long long>(rec.step), static_cast<long long>(steps), rec.loss, rec.lr,
                rec.grad_norm, avg_tok_s, avg_ms, over.c_str(), rec.comm_exposed_ms, mfu.c_str(),
                moe.c_str(), FormatBytes(mem.bytes_in_use).c_str(),
                FormatBytes(mem.peak_bytes_in_use).c_str(),
                rec.skipped ? "  SKIPPED (non-finite grad)" : "", eta);
  }
  std::fflush(stdout);
  GTP_RETURN_IF_ERROR(Append(absl::StrFormat(
      "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6g, \"skipped\": %s, "
      "\"ms\": %.3f, \"tokens_per_s\": %.1f, \"comm_exposed_ms\": %.3f, \"mem_bytes\": %d, "
      "\"peak_mem_bytes\": %d%s%s%s}\n",
      rec.step, rec.loss, rec.lr, rec.grad_norm, rec.skipped ? "true" : "false", rec.ms,
      rec.tokens_per_s, rec.comm_exposed_ms, mem.bytes_in_use, mem.peak_bytes_in_use,
      has_moe
          ? absl::StrFormat(", \"moe_tokens_min\": %.0f, \"moe_tokens_mean\": %.1f, "
                            "\"moe_tokens_max\": %.0f, \"moe_dropped\": %.0f, "
                            "\"moe_aux_loss\": %.6g, \"moe_z_loss\": %.6g",
                            rec.moe.tokens_min, rec.moe.tokens_mean, rec.moe.tokens_max,
                            rec.moe.dropped, rec.moe.aux_loss, rec.moe.z_loss)
          : std::string(),
      rec.bubble >= 0 ? absl::StrFormat(", \"pipeline_bubble\": %.4f", rec.bubble) : std::string(),
      mfu_fraction >= 0 ? absl::StrFormat(", \"mfu\": %.6g", mfu_fraction) : std::string())));
  if (!tb_) return absl::OkStatus();
  // The JSON line's scalars again as TensorBoard tags (listed in recipes/README.md).
  constexpr double kGiB = 1 << 30;
  std::vector<tensorboard::Scalar> s = {
      {"train/loss", rec.loss},
      {"train/lr", rec.lr},
      {"train/grad_norm", static_cast<float>(rec.grad_norm)},
      {"train/skipped", rec.skipped ? 1.0f : 0.0f},
      {"perf/step_ms", static_cast<float>(rec.ms)},
      {"perf/tokens_per_s", static_cast<float>(rec.tokens_per_s)},
      {"comm/exposed_ms", static_cast<float>(rec.comm_exposed_ms)},
      {"mem/in_use_gib", static_cast<float>(mem.bytes_in_use / kGiB)},
      {"mem/peak_gib", static_cast<float>(mem.peak_bytes_in_use / kGiB)},
  };
  if (has_moe) {
    s.insert(s.end(), {{"moe/tokens_min", static_cast<float>(rec.moe.tokens_min)},
                       {"moe/tokens_mean", static_cast<float>(rec.moe.tokens_mean)},
                       {"moe/tokens_max", static_cast<float>(rec.moe.tokens_max)},
                       {"moe/dropped", static_cast<float>(rec.moe.dropped)},
                       {"moe/aux_loss", static_cast<float>(rec.moe.aux_loss)},
                       {"moe/z_loss", static_cast<float>(rec.moe.z_loss)}});
  }
  if (rec.bubble >= 0) s.push_back({"perf/pipeline_bubble", static_cast<float>(rec.bubble)});
  if (mfu_fraction >= 0) s.push_back({"perf/mfu", static_cast<float>(mfu_fraction)});
  return tb_->WriteScalars(rec.step, s);
}

absl::Status Metrics::Eval(int64_t step, float loss) {
  std::printf("%sstep %5lld  validation loss %.4f\n", options_.progress_bar ? "\n" : "",
              static_cast<long long>(step), loss);
  GTP_RETURN_IF_ERROR(Append(absl::StrFormat("{\"step\": %d, \"val_loss\": %.6f}\n", step, loss)));
  return tb_ ? tb_->WriteScalars(step, {{"val/loss", loss}}) : absl::OkStatus();
}

absl::Status Metrics::Values(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string line = absl::StrFormat("{\"step\": %d", step);
  std::vector<tensorboard::Scalar> s;
  for (const auto& [key, v] : values) {
    absl::StrAppend(&line, absl::StrFormat(", \"%s\": %.6g", key, v));
    s.push_back({absl::StrCat("eval/", key), static_cast<float>(v)});
  }
  GTP_RETURN_IF_ERROR(Append(line + "}\n"));
  return tb_ ? tb_->WriteScalars(step, s) : absl::OkStatus();
}

absl::Status Metrics::Append(const std::string& line) {
  FILE* f = std::fopen(path_.c_str(), "a");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path_, ": ", std::strerror(errno),
                     " (the run directory must be writable; --run_dir picks another)"));
  }
  int err = 0;
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size() || std::fflush(f) != 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("writing ", path_, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status Metrics::ResumeAt(int64_t step) {
  std::ifstream in(path_);
  if (!in) return absl::OkStatus();  // nothing written yet
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // Our own lines: {"step": N, ... } on one line.
    long long s = -1;
    const bool whole = line.back() == '}' && std::sscanf(line.c_str(), "{\"step\": %lld", &s) == 1;
    if (whole && s <= step) {
      kept += line;
      kept += '\n';
    } else {
      ++dropped;
    }
  }
  in.close();
  if (dropped == 0) return absl::OkStatus();
  const std::string tmp = path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  int err = 0;
  if (std::fwrite(kept.data(), 1, kept.size(), f) != kept.size() || std::fflush(f) != 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("rewriting ", path_, ": ", std::strerror(err)));
  }
  std::printf("metrics: %lld line(s) after step %lld dropped from %s (those steps run again)\n",
              static_cast<long long>(dropped), static_cast<long long>(step), path_.c_str());
  return absl::OkStatus();
}

}  // namespace gtp::recipes
