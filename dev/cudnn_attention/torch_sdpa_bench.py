"""PyTorch SDPA timings beside cudnn_attention_benchmark (same shapes, bf16, causal).

Run on the GPU machine: python3 dev/cudnn_attention/torch_sdpa_bench.py
Times fwd and fwd+bwd with CUDA events (median of 30 after 5 warm-ups);
bwd = (fwd+bwd) - fwd. Each backend torch offers (flash, cudnn) separately.
FLOPs as in the C++ benchmark: fwd 2*B*NH*T^2*HS, bwd 2.5x.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(8, 1024, 12, 12, 64), (8, 1024, 16, 16, 64), (16, 1024, 12, 12, 64),
          (4, 2048, 16, 16, 128), (4, 2048, 16, 4, 128)]


def median_ms(fn, reps=30, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(),
          torch.cuda.get_device_name())
    for B, T, NH, NKV, HS in SHAPES:
        q = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, NKV, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, NKV, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
        gqa = NH != NKV
        fwd_flop = 2.0 * B * NH * T * T * HS
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

                    def fwdbwd():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                        o.backward(g)

                    f = median_ms(fwd)
                    fb = median_ms(fwdbwd)
                b = fb - f
                print(f"TORCH {B},{T},{NH},{NKV},{HS} {name:5s} fwd {f:7.3f} ms "
                      f"{fwd_flop / f * 1e-9:6.1f} TF  fwd+bwd {fb:7.3f} ms  bwd {b:7.3f} ms "
                      f"{2.5 * fwd_flop / b * 1e-9:6.1f} TF", flush=True)
            except Exception as e:  # a backend may refuse a shape (GQA)
                print(f"TORCH {B},{T},{NH},{NKV},{HS} {name:5s} unavailable: "
                      f"{str(e).splitlines()[0][:150]}", flush=True)
            q.grad = k.grad = v.grad = None


if __name__ == "__main__":
    main()
