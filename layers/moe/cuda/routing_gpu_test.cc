// The CUDA routing kernels (layers/moe/cuda/routing_cuda.h) against the CPU
// ops (layers/moe/routing.h), which run the same f32 code: selections,
// weights, selection counts, drops, the dispatch order, its padding to
// capacity, the local-expert selection and dlogits bit for bit; the aux and
// z values (double sums over tokens, a tree on the GPU)
// within double rounding. Shapes include odd token counts, partial dispatch
// chunks, 128 experts, and every token on one expert (capacity ranking).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/kernels/testing/gpu.h"
#include "gtest/gtest.h"
#include "layers/moe/cuda/routing_cuda.h"
#include "layers/moe/routing.h"

namespace gtp::layers::moe {
namespace {

using kernels::testing::BitEqual;
using kernels::testing::DeviceBuffer;

template <typename T>
Tensor Wrap(std::vector<T>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DTypeOf<T>::value, Device::Cpu());
}

template <typename T>
std::vector<T> Head(const std::vector<T>& v, int64_t n) {
  return std::vector<T>(v.begin(), v.begin() + n);
}

struct Case {
  std::string name;
  RouteParams p;
  int64_t n;
  bool bias = false;
  bool one_hot = false;  // every token prefers expert 0 by far
};

RouteParams Base(int E, int k, bool sigmoid, bool pre) {
  RouteParams p;
  p.E = E;
  p.k = k;
  p.sigmoid = sigmoid;
  p.pre_softmax = pre;
  p.scaling = 1.5f;
  p.aux_coeff = 0.01f;
  p.z_coeff = 0.001f;
  return p;
}

void Check(Case cs, uint32_t seed) {
  RouteParams& p = cs.p;
  const int E = p.E, k = p.k;
  const int64_t n = cs.n, S = n * k;
  p.lane_rows = p.seq_len > 0 ? p.lane_rows : n;
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> l(n * E), bias(E), dw(S);
  for (float& v : l) v = nd(g);
  if (cs.one_hot)
    for (int64_t t = 0; t < n; ++t) l[t * E] += 20.0f;
  for (float& v : bias) v = 0.1f * nd(g);
  for (float& v : dw) v = nd(g);
  HeapAllocator a;
  const kernels::Exec cpu = kernels::Exec::Cpu(a);
  // CPU.
  std::vector<int32_t> sel(S), sel_counts(E), pos_sel(S), slot_sel(S), expert(S), counts(E), pos(S),
      slot(S), tok(S);
  std::vector<float> w(S), aux_counts(p.G * E), dl(n * E);
  std::vector<double> acc(2 * E + 3, 0.0);
  Tensor logits = Tensor::Wrap(l.data(), {n, E}, DType::kF32, Device::Cpu());
  RouteTokens(cpu, p, logits, cs.bias ? Wrap(bias) : Tensor(), Wrap(sel), Wrap(w));
  Dispatch(cpu, E, k, Wrap(sel), Wrap(sel_counts), Wrap(pos_sel), Wrap(slot_sel));
  if (p.capacity > 0) {
    DropOverCapacity(cpu, p, Wrap(sel), Wrap(w), Wrap(sel_counts), Wrap(pos_sel), Wrap(slot_sel),
                     Wrap(expert));
  } else {
    expert = sel;
  }
  Dispatch(cpu, E, k, Wrap(expert), Wrap(counts), Wrap(pos), Wrap(slot), Wrap(tok));
  // Padding to the capacity (dropless: to the largest count) and an EP
  // rank's local experts.
  int64_t cap = p.capacity;
  for (int e = 0; e < E; ++e) cap = std::max<int64_t>(cap, counts[e]);
  std::vector<int32_t> ppos(S), ptok(E * cap), local(S);
  PadToCapacity(cpu, E, cap, Wrap(expert), Wrap(counts), Wrap(pos), Wrap(tok), Wrap(ppos),
                Wrap(ptok));
  const int e0 = E / 4, el = std::max(1, E / 2);
  SelectLocalExperts(cpu, e0, el, Wrap(expert), Wrap(local));
  CountSelections(cpu, p, Wrap(sel), Wrap(aux_counts));
  Tensor acc_t =
      Tensor::Wrap(acc.data(), {static_cast<int64_t>(acc.size())}, DType::kI64, Device::Cpu());
  AuxLoss(cpu, p, logits, Wrap(aux_counts), acc_t.Slice(E + 1, E + 2));
  p.loss_scale = 2.0f;
  RouteBackward(cpu, p, logits, Wrap(sel), Wrap(expert), Wrap(dw), Wrap(aux_counts), Wrap(dl),
                acc_t.Slice(E + 2, E + 3));
  AccumulateCounts(cpu, S, Wrap(sel_counts), Wrap(counts), acc_t);
  int64_t M = 0, M_sel = 0;
  for (int e = 0; e < E; ++e) {
    M += counts[e];
    M_sel += sel_counts[e];
  }
  ASSERT_EQ(M_sel, S);
  // CUDA.
  auto stream = kernels::testing::TestStream();
  void* st = stream.get();
  DeviceBuffer<float> d_l(l), d_bias(bias), d_dw(dw), d_w(S), d_aux(p.G * E), d_dl(n * E),
      d_part(n), d_zpart(n);
  DeviceBuffer<int32_t> d_sel(S), d_sel_counts(E), d_pos_sel(S), d_slot_sel(S), d_expert(S),
      d_counts(E), d_pos(S), d_slot(S), d_tok(S), d_ws(cuda::DispatchWorkspaceInts(S, E));
  DeviceBuffer<double> d_acc(std::vector<double>(acc.size(), 0.0));
  double* da = d_acc.get();
  p.loss_scale = 1.0f;
  cuda::RouteTokens(p, d_l.get(), cs.bias ? d_bias.get() : nullptr, n, d_sel.get(), d_w.get(), st);
  cuda::Dispatch(d_sel.get(), S, k, E, d_sel_counts.get(), d_pos_sel.get(), d_slot_sel.get(),
                 nullptr, d_ws.get(), st);
  const int32_t* d_ex = d_sel.get();
  if (p.capacity > 0) {
    cuda::DropOverCapacity(p, d_sel.get(), d_w.get(), d_sel_counts.get(), d_pos_sel.get(),
                           d_slot_sel.get(), S, d_expert.get(), st);
    d_ex = d_expert.get();
  }
  cuda::Dispatch(d_ex, S, k, E, d_counts.get(), d_pos.get(), d_slot.get(), d_tok.get(), d_ws.get(),
                 st);
  DeviceBuffer<int32_t> d_ppos(S), d_ptok(E * cap), d_local(S);
  cuda::PadToCapacity(d_ex, d_counts.get(), d_pos.get(), d_tok.get(), S, E, cap, d_ppos.get(),
                      d_ptok.get(), st);
  cuda::SelectLocalExperts(d_ex, S, e0, el, d_local.get(), st);
  cuda::CountSelections(p, d_sel.get(), n, d_aux.get(), st);
  cuda::AuxLoss(p, d_l.get(), d_aux.get(), n, d_part.get(), da + E + 1, st);
  p.loss_scale = 2.0f;
  cuda::RouteBackward(p, d_l.get(), d_sel.get(), d_ex, d_dw.get(), d_aux.get(), n, d_dl.get(),
                      d_zpart.get(), da + E + 2, st);
  cuda::AccumulateCounts(d_sel_counts.get(), d_counts.get(), E, S, da, st);
  ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(st)), cudaSuccess);
  const std::string& what = cs.name;
  EXPECT_TRUE(BitEqual(d_sel.Download(), sel)) << what << " selected";
  EXPECT_TRUE(BitEqual(d_w.Download(), w)) << what << " weight";
  EXPECT_TRUE(BitEqual(d_sel_counts.Download(), sel_counts)) << what << " selection counts";
  EXPECT_TRUE(BitEqual(d_pos_sel.Download(), pos_sel)) << what << " selection pos";
  EXPECT_TRUE(BitEqual(d_slot_sel.Download(), slot_sel)) << what << " selection rows";
  if (p.capacity > 0) {
    EXPECT_TRUE(BitEqual(d_expert.Download(), expert)) << what << " expert";
  }
  EXPECT_TRUE(BitEqual(d_counts.Download(), counts)) << what << " counts";
  EXPECT_TRUE(BitEqual(d_pos.Download(), pos)) << what << " pos";
  EXPECT_TRUE(BitEqual(Head(d_slot.Download(), M), Head(slot, M))) << what << " row_slot";
  EXPECT_TRUE(BitEqual(Head(d_tok.Download(), M), Head(tok, M))) << what << " row_tok";
  EXPECT_TRUE(BitEqual(d_ppos.Download(), ppos)) << what << " padded pos";
  EXPECT_TRUE(BitEqual(d_ptok.Download(), ptok)) << what << " padded rows";
  EXPECT_TRUE(BitEqual(d_local.Download(), local)) << what << " local experts";
  EXPECT_TRUE(BitEqual(d_aux.Download(), aux_counts)) << what << " aux counts";
  EXPECT_TRUE(BitEqual(d_dl.Download(), dl)) << what << " dlogits";
  const std::vector<double> got = d_acc.Download();
  for (int e = 0; e <= E; ++e) EXPECT_EQ(got[e], acc[e]) << what << " accumulated counts " << e;
  EXPECT_NEAR(got[E + 1], acc[E + 1], 1e-12 * std::abs(acc[E + 1])) << what << " aux";
  EXPECT_NEAR(got[E + 2], acc[E + 2], 1e-12 * std::abs(acc[E + 2])) << what << " z";
  EXPECT_GT(acc[E + 1], 0.0) << what;
  EXPECT_GT(acc[E + 2], 0.0) << what;
}

TEST(CudaMoeRouting, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  std::vector<Case> cases;
  cases.push_back({"gpt2 small: E8 k2 softmax pre, 8192 tokens", Base(8, 2, false, true), 8192});
  cases.push_back({"E6 k3 softmax post, 1 token", Base(6, 3, false, false), 1});
  cases.push_back({"E6 k3 softmax post, 1000 tokens, bias", Base(6, 3, false, false), 1000, true});
  cases.push_back({"E5 k1 sigmoid, 777 tokens", Base(5, 1, true, true), 777});
  {
    Case c{"E128 k8 sigmoid G8/4, bias, 4097 tokens", Base(128, 8, true, true), 4097, true};
    c.p.num_groups = 8;
    c.p.group_topk = 4;
    cases.push_back(c);
  }
  {
    Case c{"E64 k4 softmax pre G4/2, per sequence, 640 tokens", Base(64, 4, false, true), 640};
    c.p.num_groups = 4;
    c.p.group_topk = 2;
    c.p.seq_len = 64;
    c.p.G = 640 / 64 + 2;  // this rank holds sequences 2..11 of a lane of 12
    c.p.first_row = 128;
    c.p.lane_rows = 768;
    cases.push_back(c);
  }
  for (bool by_position : {false, true}) {
    const char* pol = by_position ? " by position" : " by probability";
    Case c{std::string("E8 k2 capacity 1.0") + pol + ", 3001 tokens", Base(8, 2, false, true),
           3001};
    c.p.capacity = static_cast<int64_t>(std::ceil(1.0 * 3001 * 2 / 8));
    c.p.by_position = by_position;
    cases.push_back(c);
    Case h{std::string("E16 k2 sigmoid, every token on expert 0, capacity") + pol,
           Base(16, 2, true, true), 2500, false, true};
    h.p.capacity = static_cast<int64_t>(std::ceil(1.25 * 2500 * 2 / 16));
    h.p.by_position = by_position;
    cases.push_back(h);
  }
  uint32_t seed = 1;
  for (const Case& c : cases) Check(c, seed++);
}

}  // namespace
}  // namespace gtp::layers::moe
