// core/kernels/fp8/wgmma_ptx.cuh — the PTX wgmma_gemm.cu's kernel is
// written in (private to this package): shared-memory barriers (mbarrier),
// the cluster's barrier and rank, TMA loads (plain and multicast), cp.async
// with its barrier arrival, bulk stores with their groups and fence, and
// the wgmma instructions with their shared-memory descriptors and fences
// (PTX ISA 8.x, sm_90a). Each wraps one or two instructions; what they are
// for is wgmma_gemm.cu's header comment.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gtp::kernels::fp8::cuda {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One arrival on the barrier at the same shared-memory offset in the
// cluster's CTA `cta` (this CTA's own when cta is its rank). Default
// semantics (release at CTA scope), as CUTLASS's cluster pipelines release
// a stage: what it orders is the arriving warp's completed wgmma reads of
// its own stage before the peer's TMA overwrites it, not data the peer reads.
__device__ __forceinline__ void MbarArriveCluster(uint32_t bar, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// Every thread of every CTA of the cluster: past here, the others' earlier
// shared-memory writes (the barriers' initialisation) are visible, and no CTA
// has left while another may still arrive on its barriers.
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Until the phase of the given parity has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// A 2D TMA load of the map's box at (c0 = column, c1 = row) into dst,
// completing its bytes on bar.
__device__ __forceinline__ void TmaLoad(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                        int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same box written to the same offset of dst (and its bytes completed
// on the barrier at bar's offset) in every CTA of the cluster in cta_mask.
__device__ __forceinline__ void TmaLoadMulticast(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                 int c0, int c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// Four bytes from global src to shared dst, asynchronously (Ampere's
// cp.async: no register waits for them); zeros instead where !valid (src
// size 0: nothing is read, but src must still be a valid address).
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(valid ? 4 : 0)
               : "memory");
}

// The barrier's current phase also waits for this thread's cp.async copies
// so far: its pending count goes up by one now and down when they are done
// (no .noinc), so the barrier's arrival count stays as initialised.
__device__ __forceinline__ void CpAsyncMbarArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared src
// to global dst by the bulk-copy engine, in this thread's current bulk group.
__device__ __forceinline__ void BulkStore(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}

// Closes this thread's current bulk group (an empty one too).
__device__ __forceinline__ void BulkCommit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Until at most kPending of this thread's bulk groups (the newest) still
// read their shared-memory sources.
template <int kPending>
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Orders this thread's generic-proxy writes to shared memory before later
// async-proxy reads of them (a bulk copy's source).
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The wgmma shared-memory descriptor of a K-major, 128-byte swizzled tile
// whose rows are 128 bytes (wgmma_gemm.cu's header comment).
__device__ __forceinline__ uint64_t Descriptor(uint32_t smem_address) {
  uint64_t d = (smem_address & 0x3FFFF) >> 4;  // start address, 16-byte units
  d |= uint64_t{1} << 16;                      // leading byte offset (unused here)
  d |= uint64_t{1024 >> 4} << 32;              // stride byte offset: 8 rows × 128 B
  d |= uint64_t{1} << 62;                      // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaWaitAll() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Waits until at most the last kPending committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of r across the wgmma
// fences (the registers are written asynchronously by the tensor cores).
__device__ __forceinline__ void FenceOperand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d[64] (+)= a (64×32 e4m3, descriptor) · b (128×32 e4m3, descriptor)ᵀ;
// accumulate = false overwrites d.
__device__ __forceinline__ void Wgmma64x128x32(float (&d)[64], uint64_t da, uint64_t db,
                                               bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(da), "l"(db), "r"(static_cast<uint32_t>(accumulate)));
}

}  // namespace gtp::kernels::fp8::cuda
