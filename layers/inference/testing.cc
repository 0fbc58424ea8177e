#include "layers/inference/testing.h"

#include <string>
#include <vector>

#include "core/philox.h"
#include "core/status.h"

namespace gtp::layers::inference::testing {

absl::Status PerturbReplicated(GptModel& m, uint64_t seed) {
  uint64_t k = 0;
  for (ReplicatedParam* p : m.replicated_params()) {
    if (p->name == "wpe.weight") continue;
    const bool weight =
        p->name.find("ln") != std::string::npos && p->name.find(".weight") != std::string::npos;
    std::vector<float> v(p->layout.global_rows);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = (weight ? 1.0f : 0.0f) + 0.2f * PhiloxNormal(seed + k, i);
    ++k;
    GTP_RETURN_IF_ERROR(m.LoadGlobal(p->name, v.data(), {static_cast<int64_t>(v.size())}));
  }
  return absl::OkStatus();
}

}  // namespace gtp::layers::inference::testing
