#include "comm/testing/conformance.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status.h"

namespace gtp::comm::testing {
namespace {

// ---- memory --------------------------------------------------------------------

class HostTestMemory : public TestMemory {
 public:
  void* Alloc(size_t bytes) override { return std::malloc(bytes); }
  void Free(void* p) override { std::free(p); }
  void Upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void Download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

// A buffer in test memory, `bytes` long (at least 16 allocated so that empty
// buffers still have distinct addresses).
class Buf {
 public:
  Buf(TestMemory& m, size_t bytes) : m_(m), bytes_(bytes), p_(m.Alloc(bytes < 16 ? 16 : bytes)) {
    GTP_CHECK(p_ != nullptr, "test allocation of ", bytes, " bytes failed");
  }
  ~Buf() { m_.Free(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* data() { return static_cast<char*>(p_); }
  void Upload(const std::vector<char>& h) {
    GTP_CHECK(h.size() <= bytes_);
    if (!h.empty()) m_.Upload(p_, h.data(), h.size());
  }
  std::vector<char> Download() {
    std::vector<char> h(bytes_);
    if (bytes_ > 0) m_.Download(h.data(), p_, bytes_);
    return h;
  }

 private:
  TestMemory& m_;
  size_t bytes_;
  void* p_;
};

// ---- deterministic inputs --------------------------------------------------------

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Input generator: element i of rank r is a function of (seed, r, i) only.
struct Gen {
  uint64_t seed;
  DType dtype;
  bool random = false;  // full-precision f32 instead of exactly summable values

  uint64_t H(int rank, int64_t i) const {
    return Mix(seed ^ Mix(static_cast<uint64_t>(rank) * 0x100000001b3ull + static_cast<uint64_t>(i)));
  }
  // The value as f32 (float dtypes) before narrowing.
  float Value(int rank, int64_t i) const {
    uint64_t h = H(rank, i);
    if (random) return static_cast<float>(h >> 40) * 0x1p-23f - 1.0f;
    return static_cast<float>(static_cast<int>(h % 511) - 255) * 0.125f;
  }
  int64_t IntValue(int rank, int64_t i) const {
    return static_cast<int64_t>(H(rank, i) % 2001) - 1000;
  }
  // Writes elements [offset, offset+count) of rank `rank` in dtype's bits.
  void Fill(int rank, int64_t offset, int64_t count, void* out) const {
    for (int64_t k = 0; k < count; ++k) {
      int64_t i = offset + k;
      switch (dtype) {
        case DType::kF32: static_cast<float*>(out)[k] = Value(rank, i); break;
        case DType::kBF16: static_cast<uint16_t*>(out)[k] = F32ToBF16Bits(Value(rank, i)); break;
        case DType::kF16: static_cast<uint16_t*>(out)[k] = F32ToF16Bits(Value(rank, i)); break;
        case DType::kI32: static_cast<int32_t*>(out)[k] = static_cast<int32_t>(IntValue(rank, i)); break;
        case DType::kI64: static_cast<int64_t*>(out)[k] = IntValue(rank, i) * 0x10000001ll; break;
        default: static_cast<uint8_t*>(out)[k] = static_cast<uint8_t>(H(rank, i) >> 24); break;
      }
    }
  }
  std::vector<char> Make(int rank, int64_t offset, int64_t count) const {
    std::vector<char> v(count * SizeOf(dtype));
    Fill(rank, offset, count, v.data());
    return v;
  }
};

uint64_t Seed(const std::string& what, int64_t count, DType dtype, int extra = 0) {
  uint64_t h = 0x243f6a8885a308d3ull;
  for (char c : what) h = Mix(h ^ static_cast<unsigned char>(c));
  return Mix(h ^ Mix(static_cast<uint64_t>(count) * 31 + static_cast<uint64_t>(dtype) * 7 +
                     static_cast<uint64_t>(extra)));
}

// Sequential reference of a reduction at input index `i` over ranks 0..n-1,
// written into `out` (one element of gen.dtype).
void ReferenceReduce(const Gen& gen, ReduceOp op, int n, int64_t i, void* out) {
  if (gen.dtype == DType::kI32 || gen.dtype == DType::kI64) {
    const bool i32 = gen.dtype == DType::kI32;
    auto val = [&](int r) { return i32 ? gen.IntValue(r, i) : gen.IntValue(r, i) * 0x10000001ll; };
    int64_t acc = val(0);
    for (int r = 1; r < n; ++r) {
      int64_t v = val(r);
      switch (op) {
        case ReduceOp::kMax: acc = v > acc ? v : acc; break;
        case ReduceOp::kMin: acc = v < acc ? v : acc; break;
        default: acc += v;
      }
    }
    if (op == ReduceOp::kMean) acc /= n;
    if (i32) *static_cast<int32_t*>(out) = static_cast<int32_t>(acc);
    else *static_cast<int64_t*>(out) = acc;
    return;
  }
  // Widened input values: what the backend sees after narrowing to dtype.
  auto val = [&](int r) {
    float v = gen.Value(r, i);
    if (gen.dtype == DType::kBF16) return BF16BitsToF32(F32ToBF16Bits(v));
    if (gen.dtype == DType::kF16) return F16BitsToF32(F32ToF16Bits(v));
    return v;
  };
  float f;
  if (gen.random) {
    // Rank order in f32: what a deterministic backend must reproduce bit for bit.
    f = val(0);
    for (int r = 1; r < n; ++r) {
      float v = val(r);
      if (op == ReduceOp::kMax) f = v > f ? v : f;
      else if (op == ReduceOp::kMin) f = v < f ? v : f;
      else f += v;
    }
  } else {
    double acc = val(0);
    for (int r = 1; r < n; ++r) {
      double v = val(r);
      if (op == ReduceOp::kMax) acc = std::fmax(acc, v);
      else if (op == ReduceOp::kMin) acc = std::fmin(acc, v);
      else acc += v;
    }
    f = static_cast<float>(acc);  // exact: inputs are multiples of 1/8 below 2^8
  }
  if (op == ReduceOp::kMean) f = f / static_cast<float>(n);
  switch (gen.dtype) {
    case DType::kBF16: *static_cast<uint16_t*>(out) = F32ToBF16Bits(f); break;
    case DType::kF16: *static_cast<uint16_t*>(out) = F32ToF16Bits(f); break;
    default: *static_cast<float*>(out) = f;
  }
}

std::string Element(DType dtype, const char* p) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return absl::StrFormat("%.9g (0x%08x)", f, FloatBits(f));
    }
    case DType::kBF16: case DType::kF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      float f = dtype == DType::kBF16 ? BF16BitsToF32(b) : F16BitsToF32(b);
      return absl::StrFormat("%.6g (0x%04x)", f, b);
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return absl::StrCat(v);
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return absl::StrCat(v);
    }
    default: return absl::StrFormat("0x%02x", static_cast<unsigned>(static_cast<uint8_t>(*p)));
  }
}

// Compares `count` elements bit for bit.
absl::Status Compare(const std::string& what, DType dtype, const char* got, const char* want,
                     int64_t count) {
  const size_t es = SizeOf(dtype);
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) != 0) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " of ", count, ": got ",
                                              Element(dtype, got + i * es), ", want ",
                                              Element(dtype, want + i * es)));
    }
  }
  return absl::OkStatus();
}

constexpr char kSentinel = static_cast<char>(0xA5);

absl::Status Done(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) return w.status();
  return (*w)->Synchronize();
}

TestMemory& Mem(const ConformanceOptions& o) { return o.memory ? *o.memory : HostMemory(); }

// Element counts to try: empty, one, odd, and (optionally) just over
// `large_bytes` bytes.
std::vector<int64_t> Counts(const ConformanceOptions& o, DType dtype, size_t large_bytes = 1 << 20) {
  std::vector<int64_t> c = {0, 1, 7, 1001};
  if (o.large) c.push_back(static_cast<int64_t>(large_bytes / SizeOf(dtype)) + 3);
  return c;
}

std::string Label(const char* op, DType dtype, int64_t count, const Communicator& c,
                  const std::string& extra = "") {
  return absl::StrCat(op, " ", DTypeName(dtype), extra.empty() ? "" : " ", extra,
                      " count=", count, " on ", c.name(), " (rank ", c.rank(), "/", c.size(), ")");
}

// ---- checks ----------------------------------------------------------------------

absl::Status CheckAllGather(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t count : Counts(o, dt)) {
      for (bool in_place : {false, true}) {
        std::string what = Label("all_gather", dt, count, c, in_place ? "in-place" : "");
        Gen gen{Seed("ag", count, dt), dt};
        const size_t bytes = count * SizeOf(dt);
        Buf recv(Mem(o), n * bytes), send(Mem(o), bytes);
        std::vector<char> init(n * bytes, kSentinel);
        std::vector<char> mine = gen.Make(me, 0, count);
        if (in_place) std::copy(mine.begin(), mine.end(), init.begin() + me * bytes);
        recv.Upload(init);
        send.Upload(mine);
        const void* src = in_place ? recv.data() + me * bytes : send.data();
        absl::Status st = Done(c.AllGather(src, recv.data(), count, dt));
        if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
        std::vector<char> got = recv.Download();
        for (int r = 0; r < n; ++r) {
          GTP_RETURN_IF_ERROR(Compare(absl::StrCat(what, " chunk of rank ", r), dt,
                                      got.data() + r * bytes, gen.Make(r, 0, count).data(), count));
        }
      }
    }
  }
  return absl::OkStatus();
}

struct RedCase {
  DType dtype;
  ReduceOp op;
  bool large;
  bool random = false;
};

std::vector<RedCase> ReductionCases(const ConformanceOptions& o) {
  std::vector<RedCase> v = {
      {DType::kF32, ReduceOp::kSum, true},   {DType::kF32, ReduceOp::kMean, false},
      {DType::kF32, ReduceOp::kMax, false},  {DType::kF32, ReduceOp::kMin, false},
      {DType::kBF16, ReduceOp::kSum, true},  {DType::kBF16, ReduceOp::kMean, false},
      {DType::kBF16, ReduceOp::kMax, false}, {DType::kF16, ReduceOp::kSum, false},
      {DType::kI32, ReduceOp::kSum, false},  {DType::kI32, ReduceOp::kMin, false},
      {DType::kI64, ReduceOp::kSum, false},
  };
  if (o.rank_order_reductions) {
    v.push_back({DType::kF32, ReduceOp::kSum, false, true});
    v.push_back({DType::kF32, ReduceOp::kMean, false, true});
  }
  return v;
}

absl::Status CheckReduceScatter(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  for (const RedCase& rc : ReductionCases(o)) {
    for (int64_t count : Counts(o, rc.dtype)) {
      if (count > 1001 && !rc.large) continue;
      // In place: the output is this rank's chunk of the input (what the
      // optimizer's gradient buckets do).
      for (bool in_place : {false, true}) {
        std::string what = Label("reduce_scatter", rc.dtype, count, c,
                                 absl::StrCat(ReduceOpName(rc.op), rc.random ? " random" : "",
                                              in_place ? " in-place" : ""));
        Gen gen{Seed("rs", count, rc.dtype, static_cast<int>(rc.op)), rc.dtype, rc.random};
        const size_t es = SizeOf(rc.dtype), bytes = count * es;
        Buf send(Mem(o), n * bytes), recv(Mem(o), bytes);
        send.Upload(gen.Make(me, 0, n * count));
        recv.Upload(std::vector<char>(bytes, kSentinel));
        char* out = in_place ? send.data() + me * bytes : recv.data();
        absl::Status st = Done(c.ReduceScatter(send.data(), out, count, rc.dtype, rc.op));
        if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
        std::vector<char> got(bytes), want(bytes);
        if (in_place) {
          const std::vector<char> all = send.Download();
          std::copy(all.begin() + me * bytes, all.begin() + (me + 1) * bytes, got.begin());
        } else {
          got = recv.Download();
        }
        for (int64_t i = 0; i < count; ++i) {
          ReferenceReduce(gen, rc.op, n, me * count + i, want.data() + i * es);
        }
        GTP_RETURN_IF_ERROR(Compare(what, rc.dtype, got.data(), want.data(), count));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAllReduce(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  for (const RedCase& rc : ReductionCases(o)) {
    for (int64_t count : Counts(o, rc.dtype)) {
      if (count > 1001 && !rc.large) continue;
      for (bool in_place : {false, true}) {
        if (in_place && count > 1001) continue;
        std::string what =
            Label("all_reduce", rc.dtype, count, c,
                  absl::StrCat(ReduceOpName(rc.op), rc.random ? " random" : "",
                               in_place ? " in-place" : ""));
        Gen gen{Seed("ar", count, rc.dtype, static_cast<int>(rc.op)), rc.dtype, rc.random};
        const size_t es = SizeOf(rc.dtype), bytes = count * es;
        Buf send(Mem(o), bytes), recv(Mem(o), bytes);
        send.Upload(gen.Make(me, 0, count));
        recv.Upload(std::vector<char>(bytes, kSentinel));
        void* dst = in_place ? send.data() : recv.data();
        absl::Status st = Done(c.AllReduce(send.data(), dst, count, rc.dtype, rc.op));
        if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
        std::vector<char> got = in_place ? send.Download() : recv.Download(), want(bytes);
        for (int64_t i = 0; i < count; ++i) ReferenceReduce(gen, rc.op, n, i, want.data() + i * es);
        GTP_RETURN_IF_ERROR(Compare(what, rc.dtype, got.data(), want.data(), count));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  for (DType dt : {DType::kF32, DType::kF8E4M3}) {
    for (int root : {0, n - 1, n / 2}) {
      for (int64_t count : Counts(o, dt)) {
        if (count > 1001 && root != 0) continue;
        std::string what = Label("broadcast", dt, count, c, absl::StrCat("root=", root));
        Gen gen{Seed("bc", count, dt, root), dt};
        const size_t bytes = count * SizeOf(dt);
        Buf buf(Mem(o), bytes);
        buf.Upload(me == root ? gen.Make(root, 0, count) : std::vector<char>(bytes, kSentinel));
        absl::Status st = Done(c.Broadcast(buf.data(), count, dt, root));
        if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
        GTP_RETURN_IF_ERROR(
            Compare(what, dt, buf.Download().data(), gen.Make(root, 0, count).data(), count));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAllToAll(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  for (DType dt : {DType::kF32, DType::kF8E4M3}) {
    std::vector<int64_t> counts = {0, 1, 7, 1001};
    if (o.large) counts.push_back(static_cast<int64_t>((1 << 20) / SizeOf(dt) / n) + 5);
    for (int64_t count : counts) {
      std::string what = Label("all_to_all", dt, count, c);
      Gen gen{Seed("a2a", count, dt), dt};
      const size_t bytes = count * SizeOf(dt);
      Buf send(Mem(o), n * bytes), recv(Mem(o), n * bytes);
      send.Upload(gen.Make(me, 0, n * count));
      recv.Upload(std::vector<char>(n * bytes, kSentinel));
      absl::Status st = Done(c.AllToAll(send.data(), recv.data(), count, dt));
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
      std::vector<char> got = recv.Download();
      for (int r = 0; r < n; ++r) {
        GTP_RETURN_IF_ERROR(Compare(absl::StrCat(what, " chunk from rank ", r), dt,
                                    got.data() + r * bytes, gen.Make(r, me * count, count).data(),
                                    count));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAllToAllV(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kU8}) {
    for (int scale : {1, 7, o.large ? 40000 : 13}) {
      // Rank i sends f(i, r) elements to rank r; some are zero.
      auto f = [&](int i, int r) -> int64_t { return ((i * 3 + r * 5 + scale) % 4) * scale; };
      std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
      int64_t stot = 0, rtot = 0;
      for (int r = 0; r < n; ++r) {
        sc[r] = f(me, r);
        sd[r] = stot + r;  // gaps between the blocks stay untouched
        stot = sd[r] + sc[r];
        rc[r] = f(r, me);
        rd[r] = rtot + 2 * r + 1;
        rtot = rd[r] + rc[r];
      }
      rtot += 3;
      std::string what = Label("all_to_allv", dt, stot, c, absl::StrCat("scale=", scale));
      Gen gen{Seed("a2av", scale, dt), dt};
      const size_t es = SizeOf(dt);
      Buf send(Mem(o), stot * es), recv(Mem(o), rtot * es);
      // Rank i's block for rank r is its generator's elements [r*1e6, r*1e6 + count).
      std::vector<char> sh(stot * es, 0);
      for (int r = 0; r < n; ++r) gen.Fill(me, r * 1000000ll, sc[r], sh.data() + sd[r] * es);
      send.Upload(sh);
      recv.Upload(std::vector<char>(rtot * es, kSentinel));
      absl::Status st = Done(c.AllToAllV(send.data(), sc, sd, recv.data(), rc, rd, dt));
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
      std::vector<char> got = recv.Download(), want(rtot * es, kSentinel);
      for (int r = 0; r < n; ++r) gen.Fill(r, me * 1000000ll, rc[r], want.data() + rd[r] * es);
      GTP_RETURN_IF_ERROR(Compare(what + " (incl. gaps)", DType::kU8, got.data(), want.data(),
                                  rtot * es));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSendRecv(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t count : Counts(o, dt)) {
      std::string what = Label("send/recv ring", dt, count, c);
      const size_t bytes = count * SizeOf(dt);
      // Two tags, received in the opposite order from the sends, plus two
      // messages on one tag that must arrive in order. A backend that pairs
      // by order (NCCL, Communicator::p2p_pairs_by_tag) gets the recvs in
      // the sends' order instead: tags 5, 3, 9, 3.
      Gen g5{Seed("p2p5", count, dt), dt}, g9{Seed("p2p9", count, dt), dt};
      Gen g3a{Seed("p2p3a", count, dt), dt}, g3b{Seed("p2p3b", count, dt), dt};
      Buf s5(Mem(o), bytes), s9(Mem(o), bytes), s3a(Mem(o), bytes), s3b(Mem(o), bytes);
      Buf r5(Mem(o), bytes), r9(Mem(o), bytes), r3a(Mem(o), bytes), r3b(Mem(o), bytes);
      s5.Upload(g5.Make(me, 0, count));
      s9.Upload(g9.Make(me, 0, count));
      s3a.Upload(g3a.Make(me, 0, count));
      s3b.Upload(g3b.Make(me, 0, count));
      std::vector<absl::StatusOr<WorkPtr>> works;
      if (c.p2p_pairs_by_tag()) {
        works.push_back(c.Recv(r9.data(), count, dt, left, 9));
        works.push_back(c.Recv(r5.data(), count, dt, left, 5));
        works.push_back(c.Recv(r3a.data(), count, dt, left, 3));
      } else {
        works.push_back(c.Recv(r5.data(), count, dt, left, 5));
        works.push_back(c.Recv(r3a.data(), count, dt, left, 3));
        works.push_back(c.Recv(r9.data(), count, dt, left, 9));
      }
      works.push_back(c.Send(s5.data(), count, dt, right, 5));
      works.push_back(c.Send(s3a.data(), count, dt, right, 3));
      works.push_back(c.Send(s9.data(), count, dt, right, 9));
      works.push_back(c.Send(s3b.data(), count, dt, right, 3));
      works.push_back(c.Recv(r3b.data(), count, dt, left, 3));
      for (auto& w : works) {
        absl::Status st = Done(std::move(w));
        if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
      }
      GTP_RETURN_IF_ERROR(Compare(what + " tag 5", dt, r5.Download().data(), g5.Make(left, 0, count).data(), count));
      GTP_RETURN_IF_ERROR(Compare(what + " tag 9", dt, r9.Download().data(), g9.Make(left, 0, count).data(), count));
      GTP_RETURN_IF_ERROR(Compare(what + " tag 3 first", dt, r3a.Download().data(), g3a.Make(left, 0, count).data(), count));
      GTP_RETURN_IF_ERROR(Compare(what + " tag 3 second", dt, r3b.Download().data(), g3b.Make(left, 0, count).data(), count));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBarrier(Communicator& c, const ConformanceOptions&) {
  for (int i = 0; i < 3; ++i) {
    absl::Status st = Done(c.Barrier());
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("barrier on ", c.name(), ": ", st.message()));
  }
  return absl::OkStatus();
}

// Several collectives in flight at once on one communicator (issued
// back to back without waiting, then waited in reverse order): backends
// that progress asynchronously must keep them apart.
absl::Status CheckInFlight(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size(), me = c.rank();
  const DType dt = DType::kF32;
  const int64_t count = o.large ? 70001 : 1001;
  const size_t bytes = count * SizeOf(dt);
  std::string what = Label("in-flight all_gather+reduce_scatter(in-place)+all_reduce+broadcast",
                           dt, count, c);
  Gen gag{Seed("if-ag", count, dt), dt}, grs{Seed("if-rs", count, dt), dt};
  Gen gar{Seed("if-ar", count, dt), dt}, gbc{Seed("if-bc", count, dt), dt};
  Buf ag_send(Mem(o), bytes), ag_recv(Mem(o), n * bytes), rs(Mem(o), n * bytes);
  Buf ar(Mem(o), bytes), bc(Mem(o), bytes);
  ag_send.Upload(gag.Make(me, 0, count));
  ag_recv.Upload(std::vector<char>(n * bytes, kSentinel));
  rs.Upload(grs.Make(me, 0, n * count));
  ar.Upload(gar.Make(me, 0, count));
  const int root = n - 1;
  bc.Upload(me == root ? gbc.Make(root, 0, count) : std::vector<char>(bytes, kSentinel));
  std::vector<absl::StatusOr<WorkPtr>> works;
  works.push_back(c.AllGather(ag_send.data(), ag_recv.data(), count, dt));
  works.push_back(c.ReduceScatter(rs.data(), rs.data() + me * bytes, count, dt, ReduceOp::kSum));
  works.push_back(c.AllReduce(ar.data(), ar.data(), count, dt, ReduceOp::kSum));
  works.push_back(c.Broadcast(bc.data(), count, dt, root));
  for (size_t i = works.size(); i-- > 0;) {
    absl::Status st = Done(std::move(works[i]));
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(what, ": op ", i, ": ", st.message()));
  }
  std::vector<char> got = ag_recv.Download();
  for (int r = 0; r < n; ++r) {
    GTP_RETURN_IF_ERROR(Compare(absl::StrCat(what, " all_gather chunk of rank ", r), dt,
                                got.data() + r * bytes, gag.Make(r, 0, count).data(), count));
  }
  std::vector<char> want(bytes);
  got = rs.Download();
  for (int64_t i = 0; i < count; ++i) {
    ReferenceReduce(grs, ReduceOp::kSum, n, me * count + i, want.data() + i * SizeOf(dt));
  }
  GTP_RETURN_IF_ERROR(Compare(what + " reduce_scatter", dt, got.data() + me * bytes, want.data(), count));
  for (int64_t i = 0; i < count; ++i) {
    ReferenceReduce(gar, ReduceOp::kSum, n, i, want.data() + i * SizeOf(dt));
  }
  GTP_RETURN_IF_ERROR(Compare(what + " all_reduce", dt, ar.Download().data(), want.data(), count));
  return Compare(what + " broadcast", dt, bc.Download().data(), gbc.Make(root, 0, count).data(),
                 count);
}

// Small checks of every collective on a sub-group.
absl::Status CheckSubGroup(Communicator& sub, const ConformanceOptions& o) {
  ConformanceOptions small = o;
  small.large = false;
  for (auto* fn : {CheckAllGather, CheckReduceScatter, CheckAllReduce, CheckBroadcast,
                   CheckAllToAll, CheckAllToAllV, CheckSendRecv, CheckBarrier}) {
    GTP_RETURN_IF_ERROR(fn(sub, small));
  }
  return absl::OkStatus();
}

absl::Status ExpectSub(Communicator& c, const std::vector<std::vector<int>>& groups,
                       const std::string& name, const ConformanceOptions& o) {
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, c.Split(groups, name));
  int want_rank = -1, want_size = 0;
  const std::vector<int>* mine = nullptr;
  for (const auto& g : groups) {
    for (size_t i = 0; i < g.size(); ++i) {
      if (g[i] == c.rank()) {
        want_rank = static_cast<int>(i);
        want_size = static_cast<int>(g.size());
        mine = &g;
      }
    }
  }
  std::string what = absl::StrCat("split ", name, " of ", c.name(), " (rank ", c.rank(), ")");
  if (mine == nullptr) {
    if (sub != nullptr) return absl::InternalError(what + ": expected nullptr for a rank in no group");
    return CheckBarrier(c, o);  // matches the members' final barrier
  }
  if (sub == nullptr) return absl::InternalError(what + ": got nullptr");
  if (sub->rank() != want_rank || sub->size() != want_size) {
    return absl::InternalError(absl::StrCat(what, ": got rank ", sub->rank(), "/", sub->size(),
                                            ", want ", want_rank, "/", want_size));
  }
  std::string want_name = absl::StrCat(name, "[", absl::StrJoin(*mine, ","), "]");
  if (sub->name() != want_name) {
    return absl::InternalError(absl::StrCat(what, ": name ", sub->name(), ", want ", want_name));
  }
  GTP_RETURN_IF_ERROR(CheckSubGroup(*sub, o));
  // Nested: split the sub-group into pairs in reverse order.
  std::vector<std::vector<int>> pairs;
  for (int i = sub->size() - 1; i >= 1; i -= 2) pairs.push_back({i, i - 1});
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> pair, sub->Split(pairs, "pair"));
  if (pair != nullptr) {
    ConformanceOptions small = o;
    small.large = false;
    GTP_RETURN_IF_ERROR(CheckAllReduce(*pair, small));
    GTP_RETURN_IF_ERROR(CheckAllGather(*pair, small));
  }
  // The parent stays usable while sub-groups exist.
  return CheckBarrier(c, o);
}

absl::Status CheckSplit(Communicator& c, const ConformanceOptions& o) {
  const int n = c.size();
  std::vector<int> rev;
  for (int r = n - 1; r >= 0; --r) rev.push_back(r);
  GTP_RETURN_IF_ERROR(ExpectSub(c, {rev}, "rev", o));
  // Evens reversed, odds rotated by one.
  std::vector<int> evens, odds;
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == 0) evens.push_back(r);
  }
  for (int r = 1; r < n; r += 2) odds.push_back(r);
  if (odds.size() > 1) std::rotate(odds.begin(), odds.begin() + 1, odds.end());
  std::vector<std::vector<int>> eo = {evens};
  if (!odds.empty()) eo.push_back(odds);
  GTP_RETURN_IF_ERROR(ExpectSub(c, eo, "parity", o));
  // Rank 0 in no group; the others in a shuffled order.
  if (n >= 2) {
    std::vector<int> rest;
    for (int r = 1; r < n; ++r) rest.push_back(r);
    std::rotate(rest.begin(), rest.begin() + rest.size() / 2, rest.end());
    GTP_RETURN_IF_ERROR(ExpectSub(c, {rest}, "rest", o));
  }
  return absl::OkStatus();
}

}  // namespace

TestMemory& HostMemory() {
  static HostTestMemory* m = new HostTestMemory();  // stateless
  return *m;
}

const std::vector<ConformanceCase>& ConformanceCases() {
  static const auto* cases = new std::vector<ConformanceCase>{
      {"AllGather", CheckAllGather},   {"ReduceScatter", CheckReduceScatter},
      {"AllReduce", CheckAllReduce},   {"Broadcast", CheckBroadcast},
      {"AllToAll", CheckAllToAll},     {"AllToAllV", CheckAllToAllV},
      {"SendRecv", CheckSendRecv},     {"Barrier", CheckBarrier},
      {"InFlight", CheckInFlight},     {"Split", CheckSplit},
  };
  return *cases;
}

absl::Status RunConformance(Communicator& comm, const ConformanceOptions& options) {
  for (const auto& c : ConformanceCases()) {
    absl::Status st = c.run(comm, options);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(c.name, ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace gtp::comm::testing
