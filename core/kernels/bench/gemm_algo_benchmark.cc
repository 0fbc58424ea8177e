// Which cuBLASLt algorithm each of a GPT block's bf16 GEMMs could run: every
// algorithm the heuristic offers (up to 8, best first; cuda::Gemm runs the
// first), and the first with its K split 2–8 ways (out-of-place f32
// reduction, a fixed order) for the wgrad, each timed on the model's shapes.
//   bazel run -c opt //core/kernels/bench:gemm_algo_benchmark [-- --benchmark_filter=124m]
// Shapes: 8192 tokens through the linears of GPT-2 124M (C = 768) and the 350M
// model (C = 1024): qkv (C → 3C), proj (C → C), fc (C → 4C), fc2 (4C → C).
// Passes as layers/parallel_linear.cc runs them (ops::Linear*):
//   fwd    y[T, out] = x[T, in]·w[out, in]ᵀ        bf16 C
//   dgrad  dx[T, in] = dy[T, out]·w[out, in]       bf16 C
//   wgrad  dw[out, in] += dy[T, out]ᵀ·x[T, in]     f32 C, beta 1 (the main grad)
// Names: BM_GemmAlgo/<model>_<in>x<out>/<pass>/algo<k> or /algo0_splitk<s>;
// the label says the algorithm (id, tile, stages, split, waves), the counter
// TFLOP/s. Benchmark only: cuda::Gemm's choice is not changed by this file.
#include <cublasLt.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/kernels/bench/bench_util.h"
#include "core/kernels/cuda/lt_common.h"

namespace gtp::kernels {
namespace {

using cuda::internal::LtAlgos;
using cuda::internal::LtAlignment;
using cuda::internal::LtCall;

enum class Pass { kFwd, kDgrad, kWgrad };
const char* PassName(Pass p) {
  return p == Pass::kFwd ? "fwd" : p == Pass::kDgrad ? "dgrad" : "wgrad";
}

constexpr int64_t kTokens = 8192;
constexpr int kMaxAlgos = 8;

// One pass's operands (row-major, our A and B as cuda::Gemm names them) and
// its descriptors, in cuBLASLt's column-major terms as gemm.cc builds them.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float beta = 0.0f;
  Tensor a, b, c;
  LtCall call;
};

void Build(const Exec& e, int64_t in, int64_t out, Pass pass, Problem* p) {
  switch (pass) {
    case Pass::kFwd:
      p->m = kTokens, p->n = out, p->k = in, p->trans_b = true;
      p->a = bench::RandomBF16(e, {kTokens, in}, 1);
      p->b = bench::RandomBF16(e, {out, in}, 2);
      p->c = e.Empty({kTokens, out}, DType::kBF16);
      break;
    case Pass::kDgrad:
      p->m = kTokens, p->n = in, p->k = out;
      p->a = bench::RandomBF16(e, {kTokens, out}, 1);
      p->b = bench::RandomBF16(e, {out, in}, 2);
      p->c = e.Empty({kTokens, in}, DType::kBF16);
      break;
    case Pass::kWgrad:
      p->m = out, p->n = in, p->k = kTokens, p->trans_a = true, p->beta = 1.0f;
      p->a = bench::RandomBF16(e, {kTokens, out}, 1);
      p->b = bench::RandomBF16(e, {kTokens, in}, 2);
      p->c = e.Zeros({out, in});
      break;
  }
  const cudaDataType_t c_type = p->c.dtype() == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  GTP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->call.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                  &op_first, sizeof(op_first)));
  GTP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->call.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                  &op_second, sizeof(op_second)));
  const int64_t lda = p->trans_a ? p->m : p->k, ldb = p->trans_b ? p->k : p->n;
  const uint64_t first_rows = p->trans_b ? p->k : p->n, first_cols = p->trans_b ? p->n : p->k;
  const uint64_t second_rows = p->trans_a ? p->m : p->k, second_cols = p->trans_a ? p->k : p->m;
  GTP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p->call.a, CUDA_R_16BF, first_rows, first_cols, ldb));
  GTP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p->call.b, CUDA_R_16BF, second_rows, second_cols, lda));
  GTP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->call.c, c_type, p->n, p->m, p->n));
}

std::string Describe(const cublasLtMatmulAlgo_t& algo, float waves) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
    return v;
  };
  return absl::StrCat(
      "id ", get(CUBLASLT_ALGO_CONFIG_ID), " tile ", get(CUBLASLT_ALGO_CONFIG_TILE_ID), " stages ",
      get(CUBLASLT_ALGO_CONFIG_STAGES_ID), " splitK ", get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
      " red ", get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), " swizzle ",
      get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), " waves ", waves);
}

// variant < kMaxAlgos: the heuristic's result `variant`; otherwise the first
// result with its K split (variant - kMaxAlgos + 2) ways.
void BM_GemmAlgo(benchmark::State& state, int64_t in, int64_t out, Pass pass, int variant) {
  bench::CudaEnv env;
  Problem p;
  Build(env.e, in, out, pass, &p);
  const auto handle = static_cast<cublasLtHandle_t>(env.ctx.lt_handle());
  std::vector<cublasLtMatmulHeuristicResult_t> results(kMaxAlgos);
  int found = 0;
  const uint32_t align_c = LtAlignment(p.c.raw_data());
  const cublasStatus_t hs =
      LtAlgos(handle, p.call, env.ctx.workspace_bytes(), LtAlignment(p.b.raw_data()),
              LtAlignment(p.a.raw_data()), align_c, kMaxAlgos, results.data(), &found);
  const int index = variant < kMaxAlgos ? variant : 0;
  if (hs != CUBLAS_STATUS_SUCCESS || index >= found) {
    state.SkipWithError(absl::StrCat("the heuristic offers ", found, " algorithms").c_str());
    return;
  }
  cublasLtMatmulAlgo_t algo = results[static_cast<size_t>(index)].algo;
  float waves = results[static_cast<size_t>(index)].wavesCount;
  if (variant >= kMaxAlgos) {
    const int32_t split = variant - kMaxAlgos + 2;
    const int32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    GTP_CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                          &split, sizeof(split)));
    GTP_CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(
        &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)));
    cublasLtMatmulHeuristicResult_t check = {};
    const cublasStatus_t cs = cublasLtMatmulAlgoCheck(handle, p.call.op, p.call.a, p.call.b,
                                                      p.call.c, p.call.c, &algo, &check);
    if (cs != CUBLAS_STATUS_SUCCESS || check.workspaceSize > env.ctx.workspace_bytes()) {
      state.SkipWithError(absl::StrCat("split ", split, ": ", cublasLtGetStatusString(cs),
                                       ", workspace ", check.workspaceSize, " of ",
                                       env.ctx.workspace_bytes(), " bytes")
                              .c_str());
      return;
    }
    waves = check.wavesCount;
  }
  state.SetLabel(Describe(algo, waves));
  const float alpha = 1.0f;
  bench::TimeCalls(state, env.stream, [&] {
    GTP_CUBLAS_CHECK(cublasLtMatmul(handle, p.call.op, &alpha, p.b.raw_data(), p.call.a,
                                    p.a.raw_data(), p.call.b, &p.beta, p.c.raw_data(), p.call.c,
                                    p.c.raw_data(), p.call.c, &algo, env.ctx.workspace(),
                                    env.ctx.workspace_bytes(), env.stream));
  });
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * p.m * p.n * p.k * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void Register() {
  struct Linear {
    const char* model;
    int64_t in, out;
  };
  const Linear linears[] = {{"124m", 768, 2304},  {"124m", 768, 768},   {"124m", 768, 3072},
                            {"124m", 3072, 768},  {"350m", 1024, 3072}, {"350m", 1024, 1024},
                            {"350m", 1024, 4096}, {"350m", 4096, 1024}};
  for (const Linear& l : linears) {
    for (Pass pass : {Pass::kFwd, Pass::kDgrad, Pass::kWgrad}) {
      // Split K only where K is long: the wgrad (K = the 8192 tokens).
      const int variants = pass == Pass::kWgrad ? kMaxAlgos + 7 : kMaxAlgos;
      for (int v = 0; v < variants; ++v) {
        const std::string variant = v < kMaxAlgos ? absl::StrCat("algo", v)
                                                  : absl::StrCat("algo0_splitk", v - kMaxAlgos + 2);
        const std::string name = absl::StrCat("BM_GemmAlgo/", l.model, "_", l.in, "x", l.out, "/",
                                              PassName(pass), "/", variant);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [l, pass, v](benchmark::State& st) { BM_GemmAlgo(st, l.in, l.out, pass, v); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels

int main(int argc, char** argv) {
  if (gtp::CudaDeviceCount() > 0) {
    gtp::kernels::Register();
  } else {
    std::fprintf(stderr, "gemm_algo_benchmark: no CUDA device; nothing to time\n");
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
