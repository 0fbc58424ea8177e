// core/kernels/ssm/testing/ssd_emulation.h — the scan kernels' emulator tests'
// shared part: a problem (inputs and the double reference), the run of a
// kernel set in the three schedules, and the check of its seven outputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/kernels/cuda/testing/emulation_checks.h"
#include "core/kernels/ssm/testing/ssd_reference.h"

namespace gtp::kernels::ssm::reference {

struct SsdProblem {
  SsdDims d;
  std::vector<float> x, Bm, Cm, D, dy, dt, A;  // dt > 0, A < 0
  SsdReference ref;
};

inline SsdProblem MakeSsdProblem(const SsdDims& d) {
  SsdProblem p;
  p.d = d;
  const int64_t nx = d.B * d.T * d.H * d.P, nt = d.B * d.T * d.H, nb = d.B * d.T * d.G * d.N;
  p.x = emu::RandomNormal(nx, 1);
  p.Bm = emu::RandomNormal(nb, 2);
  p.Cm = emu::RandomNormal(nb, 3);
  p.D = emu::RandomNormal(d.H, 4);
  p.dy = emu::RandomNormal(nx, 5);
  p.dt = emu::RandomNormal(nt, 6, 0.2f);
  p.A = emu::RandomNormal(d.H, 7, 0.5f);
  for (float& v : p.dt) v = 0.05f + std::fabs(v);  // positive step sizes
  for (float& v : p.A) v = -std::exp(v);           // negative decay rates
  p.ref = RunSsdReference(d, p.x, p.dt, p.A, p.Bm, p.Cm, p.D, p.dy);
  return p;
}

// The outputs a kernel set fills: y, dx, ddt, dB, dC poisoned with NaN; dA
// and dD accumulate onto 0.5 and −0.25 (taken off again after the run).
struct SsdOutputs {
  std::vector<float> y, dx, ddt, dB, dC, dA, dD;
};

// run(p, out) in the three schedules (bit for bit alike); returns the
// outputs in the order y, dx, ddt, dB, dC, dA, dD.
inline std::vector<std::vector<float>> RunSsdInEverySchedule(
    const SsdProblem& p, const std::function<void(const SsdProblem&, SsdOutputs&)>& run) {
  const SsdDims& d = p.d;
  const int64_t nx = d.B * d.T * d.H * d.P, nt = d.B * d.T * d.H, nb = d.B * d.T * d.G * d.N;
  return emu::InEverySchedule([&] {
    SsdOutputs o{std::vector<float>(nx, NAN),    std::vector<float>(nx, NAN),
                 std::vector<float>(nt, NAN),    std::vector<float>(nb, NAN),
                 std::vector<float>(nb, NAN),    std::vector<float>(d.H, 0.5f),
                 std::vector<float>(d.H, -0.25f)};
    run(p, o);
    for (float& v : o.dA) v -= 0.5f;
    for (float& v : o.dD) v += 0.25f;
    return std::vector<std::vector<float>>{o.y, o.dx, o.ddt, o.dB, o.dC, o.dA, o.dD};
  });
}

inline const char* const kSsdOutputNames[7] = {"y", "dx", "ddt", "dB", "dC", "dA", "dD"};

// Each output within tol of the reference (emu::Near), but those in `skip`
// (indices into the order above). For EXPECT_TRUE(SsdNear(…)).
inline ::testing::AssertionResult SsdNear(const std::vector<std::vector<float>>& out,
                                          const SsdReference& ref, double tol,
                                          std::vector<int> skip = {}) {
  const std::vector<double>* want[7] = {&ref.y,  &ref.dx, &ref.ddt, &ref.dB,
                                        &ref.dC, &ref.dA, &ref.dD};
  for (int k = 0; k < 7; ++k) {
    bool skipped = false;
    for (int s : skip) skipped = skipped || s == k;
    if (skipped) continue;
    ::testing::AssertionResult r = emu::Near(out[k], *want[k], tol, kSsdOutputNames[k]);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gtp::kernels::ssm::reference
