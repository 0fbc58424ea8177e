#include "plan/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gtp::plan {

namespace {

std::string Comm(const char* name, const CommCost& c) {
  if (c.total <= 0) return "";
  return absl::StrFormat("  %-28s total %9.2f ms   exposed %9.2f ms   hidden %5.1f %%\n", name, c.total * 1e3,
                         c.exposed * 1e3, 100.0 * (1 - c.exposed / c.total));
}

}  // namespace

std::string FormatPrediction(const Prediction& p, const Cluster& c, double cap) {
  const Layout& l = p.layout;
  std::string out = absl::StrFormat(
      "layout: %s  (world %d, %d micro-batches of %d per lane per step, global batch %d, %s)\n"
      "kernel times: %s\n",
      l.ToString(), l.world(), p.micro_batches, l.micro_batch, l.global_batch, l.precision,
      p.calibrated ? "calibrated (measured table)" : "UNCALIBRATED (default efficiency curve of the cluster file)");
  if (!p.calibrated && !p.uncalibrated.empty()) {
    absl::StrAppend(&out, "  kernels not in the table (on the default curve): ", absl::StrJoin(p.uncalibrated, ", "),
                    "\n");
  }
  if (l.precision == "fp8") {
    absl::StrAppend(
        &out,
        "fp8: a what-if (GEMMs at the fp8 peak, MXFP8 gathers), not train.precision=fp8 as "
        "gtp runs it: its block-scaled GEMMs run well below that peak and it gathers bf16 "
        "unless parallel.gtp_gather_dtype says otherwise (tools/plan/README.md)\n");
  }
  absl::StrAppend(&out, absl::StrFormat(
                            "step time %.4f s   tokens/s %.0f   MFU %.1f %% of %.0f TFLOP/s bf16   "
                            "model TFLOP/s per GPU %.1f\n",
                            p.step_time, p.tokens_per_s, 100 * p.mfu, c.peak_bf16_flops / 1e12,
                            p.model_tflops_per_gpu));
  const Breakdown& b = p.breakdown;
  absl::StrAppend(&out, absl::StrFormat("time per step on pipeline stage %d (the last to finish):\n", p.reported_stage));
  for (const auto& [k, v] : b.compute) {
    if (v > 0) absl::StrAppend(&out, absl::StrFormat("  compute %-20s %9.2f ms\n", k, v * 1e3));
  }
  absl::StrAppend(&out, Comm("tp/sp collectives", b.tp), Comm("gtp weight all-gather", b.gtp_gather),
                  Comm("gtp grad reduce-scatter", b.gtp_reduce_scatter), Comm("egtp (experts)", b.egtp),
                  Comm("ep all-to-all", b.ep), Comm("cp ring attention", b.cp), Comm("dp grad reduce-scatter", b.dp_reduce),
                  Comm("dp param all-gather", b.dp_param_gather));
  if (b.pp_p2p.total > 0) {
    absl::StrAppend(&out, absl::StrFormat("  %-28s total %9.2f ms   (on the schedule's dependency edges)\n",
                                          "pp send/recv", b.pp_p2p.total * 1e3));
  }
  absl::StrAppend(&out, absl::StrFormat("  %-28s %9.2f ms\n  %-28s %9.2f ms\n", "pipeline bubble", b.bubble * 1e3,
                                        "optimizer (adamw + norm)", b.optimizer * 1e3));
  const Memory& m = p.memory;
  absl::StrAppend(&out, absl::StrFormat(
                            "memory per GPU (busiest stage), GB: weights %.2f  grads %.2f  optimizer %.2f  "
                            "activations %.2f (recompute on %.2f / off %.2f)  gtp buffers %.2f  nccl %.2f  "
                            "context %.2f  = %.2f of %.1f%s\n",
                            m.weights / 1e9, m.grads / 1e9, m.optimizer / 1e9, m.activations / 1e9,
                            m.activations_recompute / 1e9, m.activations_no_recompute / 1e9, m.gather_buffers / 1e9,
                            m.comm_buffers / 1e9, m.context / 1e9, m.total / 1e9, cap / 1e9,
                            m.total > cap ? "  DOES NOT FIT" : ""));
  return out;
}

std::string FormatSearch(const SearchResult& r, int top, double cap) {
  std::string out = absl::StrFormat("%d layouts evaluated, %d skipped (do not divide the model or batch)\n",
                                    r.evaluated, r.skipped);
  if (r.ranked.empty()) return out + "no layout\n";
  absl::StrAppend(&out, r.ranked[0].pred.calibrated ? "kernel times: calibrated\n"
                                                    : "kernel times: UNCALIBRATED (default efficiency curve)\n");
  absl::StrAppend(&out, absl::StrFormat("%-4s %-44s %10s %12s %6s %9s %9s %9s  %s\n", "rank", "layout", "step s",
                                        "tokens/s", "MFU%", "mem GB", "exp.comm", "bubble", "why not first"));
  for (int i = 0; i < top && i < static_cast<int>(r.ranked.size()); ++i) {
    const Candidate& c = r.ranked[i];
    absl::StrAppend(&out, absl::StrFormat("%-4d %-44s %10.4f %12.0f %6.1f %9.1f %8.1fms %8.1fms  %s\n", i + 1,
                                          c.pred.layout.ToString(), c.pred.step_time, c.pred.tokens_per_s,
                                          100 * c.pred.mfu, c.pred.memory.total / 1e9, ExposedComm(c.pred) * 1e3,
                                          c.pred.breakdown.bubble * 1e3, c.why));
  }
  (void)cap;
  return out;
}

std::string JsonPrediction(const std::string& label, const Prediction& p, double cap) {
  std::string name;  // the label JSON-escaped (recipe names are plain; be safe anyway)
  for (char ch : label) {
    if (ch == '"' || ch == '\\') name += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) name += ch;
  }
  const Memory& m = p.memory;
  return absl::StrFormat(
      "{\"label\": \"%s\", \"layout\": \"%s\", \"world\": %d, \"precision\": \"%s\", \"calibrated\": %s, "
      "\"step_s\": %.9g, \"tokens_per_s\": %.9g, \"mfu\": %.6g, \"exposed_comm_s\": %.9g, \"bubble_s\": %.9g, "
      "\"memory\": {\"weights\": %.0f, \"grads\": %.0f, \"optimizer\": %.0f, \"activations\": %.0f, "
      "\"gather_buffers\": %.0f, \"comm_buffers\": %.0f, \"context\": %.0f, \"total\": %.0f, \"allocator\": %.0f}, "
      "\"fits\": %s, \"uncalibrated\": [%s]}",
      name, p.layout.ToString(), p.layout.world(), p.layout.precision, p.calibrated ? "true" : "false", p.step_time,
      p.tokens_per_s, p.mfu, ExposedComm(p), p.breakdown.bubble, m.weights, m.grads, m.optimizer, m.activations,
      m.gather_buffers, m.comm_buffers, m.context, m.total, m.allocator(), m.total <= cap ? "true" : "false",
      absl::StrJoin(p.uncalibrated, ", ", [](std::string* o, const std::string& u) { absl::StrAppend(o, "\"", u, "\""); }));
}

std::string CsvHeader() {
  return "label,world,tp,gtp,pp,vpp,dp,cp,ep,egtp,micro_batch,recompute,global_batch,step_s,tokens_per_s,"
         "tokens_per_s_per_gpu,mfu,model_tflops_per_gpu,memory_gb,fits,exposed_comm_s,bubble_s,calibrated";
}

std::string CsvRow(const std::string& label, const Prediction& p, double cap) {
  const Layout& l = p.layout;
  return absl::StrFormat("%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.4f,%.2f,%.3f,%d,%.6g,%.6g,%d", label,
                         l.world(), l.tp, l.gtp, l.pp, l.vpp, l.dp, l.cp, l.ep, l.egtp, l.micro_batch, l.recompute ? 1 : 0,
                         l.global_batch, p.step_time, p.tokens_per_s, p.tokens_per_s / l.world(), p.mfu,
                         p.model_tflops_per_gpu, p.memory.total / 1e9, p.memory.total <= cap ? 1 : 0, ExposedComm(p),
                         p.breakdown.bubble, p.calibrated ? 1 : 0);
}

}  // namespace gtp::plan
