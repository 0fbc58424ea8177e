// plan/report.h — a prediction or a search as text and CSV.
//
// The text says on its first lines whether the kernel times are calibrated
// (a measured table) or the built-in default curve ("UNCALIBRATED"). CSV:
// one header line (CsvHeader) and one row a prediction, the columns
// tools/plan/plot.py reads. Pure; thread-safe.
#pragma once

#include <string>

#include "plan/search.h"
#include "plan/step.h"

namespace gtp::plan {

std::string FormatPrediction(const Prediction& p, const Cluster& c, double memory_cap);
// The top `top` of a search, with each one's reason for losing to the first.
std::string FormatSearch(const SearchResult& r, int top, double memory_cap);

// One JSON object (one line) for scripts (tools/plan/validate_1gpu.sh):
// {"label", "layout", "world", "precision", "calibrated", "step_s",
//  "tokens_per_s", "mfu", "exposed_comm_s", "bubble_s", "memory": {"weights",
//  "grads", "optimizer", "activations", "gather_buffers", "comm_buffers",
//  "context", "total", "allocator"} (bytes), "fits"}.
std::string JsonPrediction(const std::string& label, const Prediction& p, double memory_cap);

std::string CsvHeader();
// `label`: a free column (the scaling family, a scenario name).
std::string CsvRow(const std::string& label, const Prediction& p, double memory_cap);

}  // namespace gtp::plan
