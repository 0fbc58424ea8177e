// cuDNN graph-API attention; see cudnn_attention.h for the graphs built.
#include "core/kernels/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::kernels::cuda {
namespace {

absl::Status CudnnError(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat("cuDNN: ", what, ": ", cudnnGetErrorString(st));
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  if (last[0] != 0) absl::StrAppend(&msg, " (", last, ")");
  if (st == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH) {
    return absl::UnimplementedError(msg);
  }
  return absl::InternalError(msg);
}

#define GTP_CUDNN_RETURN_IF_ERROR(expr) GTP_RETURN_IF_ERROR(CudnnError((expr), #expr))

struct DescDeleter {
  void operator()(void* d) const { cudnnBackendDestroyDescriptor(d); }
};
using Desc = std::unique_ptr<void, DescDeleter>;

// Tensor unique ids of the graphs (the variant pack binds pointers to them).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kOne,
  kDQAccum,
  kVirtual = 100,
};

using Dims = std::vector<int64_t>;

// Builds one operation graph; owns every descriptor it makes (they must
// outlive the execution plan). The first failure sticks in status().
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t h) : handle_(h) {}

  void* Tensor(int64_t uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides,
               bool is_virtual = false, bool by_value = false) {
    void* t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (t == nullptr) return nullptr;
    const int64_t align = 16;
    Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.size(), dims.data());
    Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.size(), strides.data());
    Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    Set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    Set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    Finalize(t, "tensor");
    return t;
  }
  // A virtual (on-chip) intermediate.
  void* Virtual(cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
    return Tensor(kVirtual + next_virtual_++, dt, dims, strides, /*is_virtual=*/true);
  }
  void* Scalar(int64_t uid) {
    return Tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*by_value=*/true);
  }

  // y = mode(x[, b[, t]]) computed in `math`.
  void Pointwise(cudnnPointwiseMode_t mode, void* x, void* b, void* t, void* y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    void* pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (pw == nullptr) return;
    Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (axis >= 0) Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    Finalize(pw, "pointwise descriptor");
    void* op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (op == nullptr) return;
    SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    AddOp(op, "pointwise op");
  }
  // c = a · b (batched over the leading dims, broadcasting a smaller head dim).
  void Matmul(void* a, void* b, void* c) {
    void* mm = Make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    if (mm == nullptr) return;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    Finalize(mm, "matmul descriptor");
    void* op = Make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    if (op == nullptr) return;
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    AddOp(op, "matmul op");
  }
  // y = reduce_op(x) over the dims where y has extent 1.
  void Reduction(cudnnReduceTensorOp_t red, void* x, void* y) {
    void* rd = Make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    if (rd == nullptr) return;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    Set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
    Set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    Finalize(rd, "reduction descriptor");
    void* op = Make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    if (op == nullptr) return;
    SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    AddOp(op, "reduction op");
  }
  // y = x viewed with y's dims/strides (a transpose here).
  void Reshape(void* x, void* y) {
    void* op = Make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    if (op == nullptr) return;
    SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    AddOp(op, "reshape op");
  }

  // Finalizes the graph, asks heuristics (mode A) for engine configs and
  // returns the first plan that finalizes (and, when deterministic, whose
  // engine is not marked NONDETERMINISTIC).
  absl::Status Build(bool deterministic, int choice, Desc* plan, int64_t* workspace,
                     int64_t* engine_index) {
    GTP_RETURN_IF_ERROR(status_);
    void* graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    GTP_RETURN_IF_ERROR(status_);
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops_.size(),
        ops_.data());
    Finalize(graph, "operation graph");
    GTP_RETURN_IF_ERROR(status_);

    void* heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    GTP_RETURN_IF_ERROR(status_);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    SetDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    Finalize(heur, "engine heuristics");
    GTP_RETURN_IF_ERROR(status_);
    int64_t count = 0;
    GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
        heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    std::vector<void*> cfgs;
    for (int64_t i = 0; i < count; ++i) cfgs.push_back(Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    GTP_RETURN_IF_ERROR(status_);
    int64_t got = 0;
    if (count > 0) {
      GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                                         cfgs.data()));
    }
    std::string tried;
    for (int64_t i = 0; i < got; ++i) {
      Desc engine = MakeOwned(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      int64_t n = 0;
      void* e = engine.get();
      if (cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   &e) != CUDNN_STATUS_SUCCESS) {
        continue;
      }
      int64_t index = -1;
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
      cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
      int64_t num_notes = 0;
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &num_notes, notes);
      bool nondeterministic = false;
      for (int64_t j = 0; j < num_notes; ++j) {
        nondeterministic |= notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
      }
      absl::StrAppend(&tried, " engine ", index, nondeterministic ? " (nondeterministic)" : "");
      if (deterministic && nondeterministic) continue;
      Desc p = MakeOwned(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (p == nullptr) return status_;
      cudnnStatus_t st = cudnnBackendSetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                                  CUDNN_TYPE_HANDLE, 1, &handle_);
      if (st == CUDNN_STATUS_SUCCESS) {
        st = cudnnBackendSetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
      }
      if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(p.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        absl::StrAppend(&tried, ": ", cudnnGetErrorString(st));
        continue;
      }
      if (choice-- > 0) continue;
      int64_t ws = 0;
      GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
          p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
      *plan = std::move(p);
      *workspace = ws;
      *engine_index = index;
      return absl::OkStatus();
    }
    return absl::UnimplementedError(absl::StrCat("cuDNN: no engine supports the attention graph (",
                                                 got, " heuristic configs;", tried, ")"));
  }

  const absl::Status& status() const { return status_; }

 private:
  Desc MakeOwned(cudnnBackendDescriptorType_t type) {
    void* d = nullptr;
    absl::Status st = CudnnError(cudnnBackendCreateDescriptor(type, &d), "create descriptor");
    if (!st.ok()) {
      if (status_.ok()) status_ = st;
      return nullptr;
    }
    return Desc(d);
  }
  void* Make(cudnnBackendDescriptorType_t type) {
    if (!status_.ok()) return nullptr;
    Desc d = MakeOwned(type);
    void* raw = d.get();
    if (raw != nullptr) owned_.push_back(std::move(d));
    return raw;
  }
  void Set(void* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
           const void* value) {
    if (!status_.ok() || d == nullptr) return;
    status_ = CudnnError(cudnnBackendSetAttribute(d, name, type, n, value),
                         absl::StrCat("set attribute ", static_cast<int>(name)).c_str());
  }
  void SetDesc(void* d, cudnnBackendAttributeName_t name, void* value) {
    if (value == nullptr && status_.ok()) status_ = absl::InternalError("null descriptor");
    Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void Finalize(void* d, const char* what) {
    if (!status_.ok() || d == nullptr) return;
    status_ = CudnnError(cudnnBackendFinalize(d), absl::StrCat("finalize ", what).c_str());
  }
  void AddOp(void* op, const char* what) {
    Finalize(op, what);
    if (status_.ok()) ops_.push_back(op);
  }

  cudnnHandle_t handle_;
  absl::Status status_;
  int64_t next_virtual_ = 0;
  std::vector<void*> ops_;

 public:
  std::vector<Desc> owned_;  // moved into the Plan
};

absl::Status CheckShape(const AttentionShape& s) {
  if (s.HS != 64 && s.HS != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN attention: head size ", s.HS, " is not supported (64 or 128)"));
  }
  if (s.B <= 0 || s.T <= 0 || s.NH <= 0 || s.NKV <= 0 || s.NH % s.NKV != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN attention: bad shape B=", s.B, " T=", s.T,
                                                   " NH=", s.NH, " NKV=", s.NKV,
                                                   " (NH must be a multiple of NKV)"));
  }
  // Rows must not overlap, and must start 16-byte aligned (the descriptors
  // promise cuDNN 16-byte alignment).
  if (s.row_stride != 0 && (s.row_stride < std::max(s.NH, s.NKV) * s.HS || s.row_stride % 8 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN attention: row stride ", s.row_stride,
        " must be 0 (dense) or a multiple of 8 (16-byte bf16 rows) of at least max(NH, NKV)·HS = ",
        std::max(s.NH, s.NKV) * s.HS));
  }
  return absl::OkStatus();
}

constexpr int64_t kAlign = 256;
int64_t AlignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

struct CudnnAttention::Plan {
  std::vector<Desc> descriptors;  // graph pieces the plan refers to
  Desc plan;
  int64_t plan_workspace = 0;   // cuDNN's own
  int64_t extra_workspace = 0;  // ours, in front of cuDNN's (backward: D = rowsum(dO∘O), dQ accum)
  int64_t softmax_sum_offset = 0, dq_accum_offset = -1;
  int64_t engine = -1;
  bool causal = true;  // the graph has the mask (and so the kNegInf scalar)
  // By-value scalars; the variant pack points at them.
  float scale = 0, neg_inf = -1e10f, one = 1.0f;
  int64_t total_workspace() const { return extra_workspace + plan_workspace; }
};

int64_t CudnnVersion() { return static_cast<int64_t>(cudnnGetVersion()); }

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(int device) {
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuDNN attention: cudaSetDevice(", device, "): ", cudaGetErrorString(err)));
  }
  cudnnHandle_t h = nullptr;
  GTP_CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(h));
}

CudnnAttention::CudnnAttention(cudnnContext* handle) : handle_(handle) {}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // plans before the handle
  if (handle_ != nullptr) cudnnDestroy(handle_);
}

absl::StatusOr<CudnnAttention::Plan*> CudnnAttention::GetPlan(const AttentionShape& s,
                                                              bool backward) {
  const auto key = std::make_tuple(s, backward, backward && deterministic_, config_choice_);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  GTP_RETURN_IF_ERROR(CheckShape(s));

  const int64_t B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  // Our layouts: [B, T, heads, HS] viewed as [B, heads, T, HS]. q, k, v and
  // their gradients have tokens q_rs / kv_rs elements apart (s.row_stride
  // when packed); out and dO are dense (o_str), whatever q's layout.
  const int64_t q_rs = s.row_stride != 0 ? s.row_stride : NH * HS;
  const int64_t kv_rs = s.row_stride != 0 ? s.row_stride : NKV * HS;
  const Dims q_dims{B, NH, T, HS}, q_str{T * q_rs, HS, q_rs, 1};
  const Dims o_str{T * NH * HS, HS, NH * HS, 1};
  const Dims kv_dims{B, NKV, T, HS}, kv_str{T * kv_rs, HS, kv_rs, 1};
  const Dims kvT_dims{B, NKV, HS, T}, kvT_str{T * kv_rs, HS, 1, kv_rs};
  const Dims s_dims{B, NH, T, T}, s_str{NH * T * T, T * T, T, 1};
  const Dims sT_dims{B, NH, T, T}, sT_str{NH * T * T, T * T, 1, T};
  const Dims row_dims{B, NH, T, 1}, row_str{NH * T, T, 1, 1};  // lse[B, NH, T]

  auto plan = std::make_unique<Plan>();
  plan->scale = 1.0f / std::sqrt(static_cast<float>(HS));
  plan->causal = s.causal;
  GraphBuilder g(handle_);

  // Causal mask: select(row ≥ col, x, −inf); bidirectional: x itself (no mask ops).
  auto mask = [&](void* x) {
    if (!s.causal) return x;
    void* row = g.Virtual(CUDNN_DATA_INT32, s_dims, s_str);
    void* col = g.Virtual(CUDNN_DATA_INT32, s_dims, s_str);
    void* keep = g.Virtual(CUDNN_DATA_BOOLEAN, s_dims, s_str);
    void* y = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, CUDNN_DATA_INT32, 2);
    g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, CUDNN_DATA_INT32, 3);
    g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
    g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, g.Scalar(kNegInf), keep, y);
    return y;
  };

  void* q = g.Tensor(kQ, bf, q_dims, q_str);
  void* kT = g.Tensor(kK, bf, kvT_dims, kvT_str);
  void* scale = g.Scalar(kScale);
  if (!backward) {
    void* v = g.Tensor(kV, bf, kv_dims, kv_str);
    void* o = g.Tensor(kO, bf, q_dims, o_str);
    void* stats = g.Tensor(kStats, f32, row_dims, row_str);
    void* sc = g.Virtual(f32, s_dims, s_str);
    g.Matmul(q, kT, sc);
    void* scaled = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_MUL, sc, scale, nullptr, scaled);
    void* masked = mask(scaled);
    void* mx = g.Virtual(f32, row_dims, row_str);
    g.Reduction(CUDNN_REDUCE_TENSOR_MAX, masked, mx);
    void* sub = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_SUB, masked, mx, nullptr, sub);
    void* ex = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, nullptr, ex);
    void* sum = g.Virtual(f32, row_dims, row_str);
    g.Reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    void* lg = g.Virtual(f32, row_dims, row_str);
    g.Pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, lg);
    g.Pointwise(CUDNN_POINTWISE_ADD, mx, lg, nullptr, stats);
    void* p = g.Virtual(bf, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_DIV, ex, sum, nullptr, p);
    g.Matmul(p, v, o);
  } else {
    void* vT = g.Tensor(kV, bf, kvT_dims, kvT_str);
    void* o = g.Tensor(kO, bf, q_dims, o_str);
    void* dO = g.Tensor(kDO, bf, q_dims, o_str);
    void* stats = g.Tensor(kStats, f32, row_dims, row_str);
    void* dq = g.Tensor(kDQ, bf, q_dims, q_str);
    void* dk = g.Tensor(kDK, bf, kv_dims, kv_str);
    void* dv = g.Tensor(kDV, bf, kv_dims, kv_str);
    void* softmax_sum = g.Tensor(kSoftmaxSum, f32, row_dims, row_str);
    // D = rowsum(dO ∘ O) · 1
    void* prod = g.Virtual(f32, q_dims, o_str);
    g.Pointwise(CUDNN_POINTWISE_MUL, dO, o, nullptr, prod);
    void* rsum = g.Virtual(f32, row_dims, row_str);
    g.Reduction(CUDNN_REDUCE_TENSOR_ADD, prod, rsum);
    g.Pointwise(CUDNN_POINTWISE_MUL, rsum, g.Scalar(kOne), nullptr, softmax_sum);
    // P = exp(mask(Q·Kᵀ·scale − lse))
    void* sc = g.Virtual(f32, s_dims, s_str);
    g.Matmul(q, kT, sc);
    void* scaled = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_MUL, sc, scale, nullptr, scaled);
    void* sub = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_SUB, scaled, stats, nullptr, sub);
    void* masked = mask(sub);
    void* p = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_EXP, masked, nullptr, nullptr, p);
    // dV = Pᵀ·dO (per query head, then summed over the group for GQA)
    const bool gqa = NH != NKV;
    const Dims full_dims{B, NH, T, HS}, full_str{NH * T * HS, T * HS, HS, 1};
    void* pT = g.Virtual(bf, sT_dims, sT_str);
    g.Reshape(p, pT);
    if (!gqa) {
      g.Matmul(pT, dO, dv);
    } else {
      void* dv_full = g.Virtual(bf, full_dims, full_str);
      g.Matmul(pT, dO, dv_full);
      g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
    }
    // dS = P ∘ (dO·Vᵀ − D) · scale
    void* dp = g.Virtual(f32, s_dims, s_str);
    g.Matmul(dO, vT, dp);
    void* d1 = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, nullptr, d1);
    void* d2 = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_MUL, d1, p, nullptr, d2);
    void* ds = g.Virtual(f32, s_dims, s_str);
    g.Pointwise(CUDNN_POINTWISE_MUL, d2, scale, nullptr, ds);
    // dK = dSᵀ·Q
    void* dsT = g.Virtual(bf, sT_dims, sT_str);
    g.Reshape(ds, dsT);
    if (!gqa) {
      g.Matmul(dsT, q, dk);
    } else {
      void* dk_full = g.Virtual(bf, full_dims, full_str);
      g.Matmul(dsT, q, dk_full);
      g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
    }
    // dQ = dS·K: written by the matmul itself (deterministic), or
    // accumulated in f32 in the workspace and copied out.
    void* k = g.Virtual(bf, kv_dims, kv_str);
    g.Reshape(kT, k);
    plan->softmax_sum_offset = 0;
    plan->extra_workspace = AlignUp(B * NH * T * static_cast<int64_t>(sizeof(float)));
    if (deterministic_) {
      g.Matmul(ds, k, dq);
    } else {
      const Dims acc_str{NH * T * HS, T * HS, HS, 1};
      void* acc = g.Tensor(kDQAccum, f32, q_dims, acc_str);
      g.Matmul(ds, k, acc);
      g.Pointwise(CUDNN_POINTWISE_IDENTITY, acc, nullptr, nullptr, dq);
      plan->dq_accum_offset = plan->extra_workspace;
      plan->extra_workspace += AlignUp(B * NH * T * HS * static_cast<int64_t>(sizeof(float)));
    }
  }
  GTP_RETURN_IF_ERROR(g.Build(backward && deterministic_, config_choice_, &plan->plan,
                              &plan->plan_workspace, &plan->engine));
  plan->descriptors = std::move(g.owned_);
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

absl::StatusOr<int64_t> CudnnAttention::ForwardWorkspaceBytes(const AttentionShape& s) {
  GTP_ASSIGN_OR_RETURN(Plan * p, GetPlan(s, false));
  return p->total_workspace();
}

absl::StatusOr<int64_t> CudnnAttention::BackwardWorkspaceBytes(const AttentionShape& s) {
  GTP_ASSIGN_OR_RETURN(Plan * p, GetPlan(s, true));
  return p->total_workspace();
}

int64_t CudnnAttention::ForwardEngine(const AttentionShape& s) const {
  auto it = plans_.find(std::make_tuple(s, false, false, config_choice_));
  return it == plans_.end() ? -1 : it->second->engine;
}

int64_t CudnnAttention::BackwardEngine(const AttentionShape& s) const {
  auto it = plans_.find(std::make_tuple(s, true, deterministic_, config_choice_));
  return it == plans_.end() ? -1 : it->second->engine;
}

namespace {

absl::Status Execute(cudnnHandle_t h, const CudnnAttention::Plan& p,
                     const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                     void* workspace, cudaStream_t stream) {
  GTP_CUDNN_RETURN_IF_ERROR(cudnnSetStream(h, stream));
  void* vp = nullptr;
  GTP_CUDNN_RETURN_IF_ERROR(
      cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
  Desc owned(vp);
  void* ws = static_cast<char*>(workspace) + p.extra_workspace;
  GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                                     CUDNN_TYPE_INT64, uids.size(), uids.data()));
  GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendSetAttribute(
      vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.size(), ptrs.data()));
  GTP_CUDNN_RETURN_IF_ERROR(
      cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(vp));
  GTP_CUDNN_RETURN_IF_ERROR(cudnnBackendExecute(h, p.plan.get(), vp));
  return absl::OkStatus();
}

absl::Status CheckWorkspace(const CudnnAttention::Plan& p, const void* workspace, int64_t bytes) {
  if (bytes < p.total_workspace() || (p.total_workspace() > 0 && workspace == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN attention: workspace of ", bytes,
                                                   " bytes, needs ", p.total_workspace()));
  }
  if (reinterpret_cast<uintptr_t>(workspace) % kAlign != 0) {
    return absl::InvalidArgumentError("cuDNN attention: workspace not 256-byte aligned");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudnnAttention::Forward(const bf16* q, const bf16* k, const bf16* v, bf16* out,
                                     float* lse, const AttentionShape& s, void* workspace,
                                     int64_t workspace_bytes, cudaStream_t stream) {
  GTP_ASSIGN_OR_RETURN(Plan * p, GetPlan(s, false));
  GTP_RETURN_IF_ERROR(CheckWorkspace(*p, workspace, workspace_bytes));
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs{
      const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v), out, lse, &p->scale};
  if (p->causal) {
    uids.push_back(kNegInf);
    ptrs.push_back(&p->neg_inf);
  }
  return Execute(handle_, *p, uids, ptrs, workspace, stream);
}

absl::Status CudnnAttention::Backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                      const bf16* out, const float* lse, bf16* dq, bf16* dk,
                                      bf16* dv, const AttentionShape& s, void* workspace,
                                      int64_t workspace_bytes, cudaStream_t stream) {
  GTP_ASSIGN_OR_RETURN(Plan * p, GetPlan(s, true));
  GTP_RETURN_IF_ERROR(CheckWorkspace(*p, workspace, workspace_bytes));
  char* ws = static_cast<char*>(workspace);
  std::vector<int64_t> uids{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kScale, kOne};
  std::vector<void*> ptrs{const_cast<bf16*>(q),
                          const_cast<bf16*>(k),
                          const_cast<bf16*>(v),
                          const_cast<bf16*>(out),
                          const_cast<bf16*>(dout),
                          const_cast<float*>(lse),
                          dq,
                          dk,
                          dv,
                          ws + p->softmax_sum_offset,
                          &p->scale,
                          &p->one};
  if (p->causal) {
    uids.push_back(kNegInf);
    ptrs.push_back(&p->neg_inf);
  }
  if (p->dq_accum_offset >= 0) {
    // cuDNN ≥ 9.6 zeroes the accumulator itself; older ones need it zeroed.
    void* acc = ws + p->dq_accum_offset;
    if (CudnnVersion() < 90600) {
      const cudaError_t err =
          cudaMemsetAsync(acc, 0, s.B * s.NH * s.T * s.HS * sizeof(float), stream);
      if (err != cudaSuccess) return absl::InternalError(cudaGetErrorString(err));
    }
    uids.push_back(kDQAccum);
    ptrs.push_back(acc);
  }
  return Execute(handle_, *p, uids, ptrs, workspace, stream);
}

}  // namespace gtp::kernels::cuda
