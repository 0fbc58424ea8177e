#!/usr/bin/env python3
"""PyTorch GPT-2 trained on gtp's own initial weights and token batches.

The PyTorch half of tools/bench/bench.sh: builds GPT-2 of the given shape
(LayerNorm eps 1e-5, GELU-tanh, learned positions, tied embeddings, biases),
loads the weights a gtp run saved at iteration 0 (`ckpt export --names
hf-gpt2 --vocab V`), replays the micro-batches that run dumped
(train.dump_tokens: int32 tokens[B, T] then targets[B, T] per micro-batch,
in step order) and trains with the optimizer gtp uses:

  - AdamW (torch fused=True), betas (beta1, beta2), eps 1e-8, decoupled
    weight decay on tensors of rank >= 2 only (optimizer/optimizer.h);
  - lr per step as optimizer/lr_schedule.cc (warmup (s+1)/W then cosine or
    linear to min_lr at `steps`, warmup clamped to steps as trainer.cc does),
    in float32 like gtp;
  - global grad-norm clipping (gtp scales by clip/(norm + 1e-6) when
    norm > clip; clip_grad_norm_ is the same);
  - loss = mean CE over the micro-batch; M = global/micro micro-batches per
    step, each backward of loss/M (gtp's mean of micro-batch means).

Modes: eager or torch.compile; bf16 autocast (default) or f32 (TF32 off);
attention is F.scaled_dot_product_attention(is_causal=True); params stay f32.

  python3 tools/bench/torch_gpt.py --weights w.safetensors --tokens tokens.bin \\
      --n_layer 12 --n_embd 768 --n_head 12 --vocab 50257 --seq_len 1024 \\
      --micro_batch 8 --global_batch 8 --steps 200 --mode compile --json out.json

Prints one line per step (loss, grad norm, lr, ms) and, last, one JSON line:
median ms/step over steps after --skip (warm-up and compilation), tokens/s,
MFU (tools/bench/mirror.py's flop_per_token, the formula of
recipes/trainer/mfu.h), torch.cuda.max_memory_allocated, and the per-step
losses, grad norms and times. Needs only the stdlib, torch and (optionally)
safetensors.
"""
import argparse
import json
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mirror import f32, flop_per_token, lr_at  # noqa: E402  (stdlib-only sibling)


class MoE(nn.Module):
    """gtp's default MoE MLP (layers/moe): an f32 linear gate without bias,
    softmax scores before top-k, the k selected probabilities as combine
    weights (not renormalised), dropless; E experts of GELU-tanh MLPs without
    biases; the Switch aux loss (coeff·E·Σ f_e·P_e over the micro-batch) and
    the router z-loss (coeff·mean logsumexp²) added to the loss. Experts run
    as torch._grouped_mm (bf16 on Hopper, where this torch has it) or one
    matmul per expert (impl "loop": a host sync for the counts, as gtp)."""

    def __init__(self, C, E, k, H, impl):
        super().__init__()
        self.E, self.k, self.impl = E, k, impl
        self.gate = nn.Linear(C, E, bias=False)
        self.w1 = nn.Parameter(torch.randn(E, H, C) * 0.02)
        self.w2 = nn.Parameter(torch.randn(E, C, H) * 0.02)
        self.aux = None

    def forward(self, x, aux_coeff, z_coeff):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        n = x.shape[0]
        logits = F.linear(x.float(), self.gate.weight.float())
        probs = logits.softmax(-1)
        w, sel = probs.topk(self.k, dim=-1)
        flat = sel.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.E)
        xs = x[order // self.k]
        if self.impl == "grouped":
            offs = counts.cumsum(0).to(torch.int32)
            xs = xs.to(torch.bfloat16)
            h = torch._grouped_mm(xs, self.w1.to(torch.bfloat16).transpose(-2, -1), offs=offs)
            h = F.gelu(h, approximate="tanh")
            ys = torch._grouped_mm(h, self.w2.to(torch.bfloat16).transpose(-2, -1), offs=offs)
        else:
            parts, start = [], 0
            for e, c in enumerate(counts.tolist()):
                xe = xs[start:start + c]
                parts.append(F.linear(F.gelu(F.linear(xe, self.w1[e]), approximate="tanh"), self.w2[e]))
                start += c
            ys = torch.cat(parts)
        y = torch.zeros(n * self.k, shape[-1], device=x.device, dtype=ys.dtype)
        y[order] = ys
        y = (y.view(n, self.k, -1) * w.unsqueeze(-1).to(ys.dtype)).sum(1)
        f = counts.float() / (n * self.k)
        self.aux = aux_coeff * self.E * (f * probs.mean(0)).sum() + \
            z_coeff * torch.logsumexp(logits, -1).pow(2).mean()
        return y.view(shape).to(x.dtype)


class Block(nn.Module):
    def __init__(self, C, H, moe=None):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        if moe is None:
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.moe = None
        else:
            self.moe = MoE(C, *moe)
        self.H = H

    def forward(self, x, aux_coeff=0.0, z_coeff=0.0):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        if self.moe is not None:
            return x + self.moe(self.ln_2(x), aux_coeff, z_coeff)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, H, moe=None, aux_coeff=0.0, z_coeff=0.0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, moe) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.aux_coeff, self.z_coeff = aux_coeff, z_coeff

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x, self.aux_coeff, self.z_coeff)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))  # f32 under autocast
        for b in self.h:
            if b.moe is not None:
                loss = loss + b.moe.aux
        return loss


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        d = f.read()
    n = struct.unpack("<Q", d[:8])[0]
    header = json.loads(d[8:8 + n])
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(d[8 + n + b:8 + n + e]), dtype=dtypes[v["dtype"]]).view(v["shape"])
    return out


def load_hf_gpt2(model, w, L):
    """`ckpt export --names hf-gpt2` tensors into GPT: Conv1D [in, out] -> Linear [out, in]."""
    sd = {"wte.weight": w["transformer.wte.weight"], "wpe.weight": w["transformer.wpe.weight"],
          "ln_f.weight": w["transformer.ln_f.weight"], "ln_f.bias": w["transformer.ln_f.bias"]}
    for l in range(L):
        p, q = f"transformer.h.{l}.", f"h.{l}."
        for ours, theirs in [("ln_1", "ln_1"), ("ln_2", "ln_2")]:
            sd[q + ours + ".weight"], sd[q + ours + ".bias"] = w[p + theirs + ".weight"], w[p + theirs + ".bias"]
        for ours, theirs in [("c_attn", "attn.c_attn"), ("attn_proj", "attn.c_proj"),
                             ("c_fc", "mlp.c_fc"), ("mlp_proj", "mlp.c_proj")]:
            sd[q + ours + ".weight"] = w[p + theirs + ".weight"].t().contiguous()
            sd[q + ours + ".bias"] = w[p + theirs + ".bias"]
    missing = set(model.state_dict()) - set(sd)
    if missing or len(sd) != len(model.state_dict()):
        raise SystemExit(f"torch_gpt: weights do not match the model: missing {sorted(missing)[:5]}")
    for k, v in sd.items():
        if tuple(v.shape) != tuple(model.state_dict()[k].shape):
            raise SystemExit(f"torch_gpt: {k} has shape {list(v.shape)}, the model wants "
                             f"{list(model.state_dict()[k].shape)} (check --vocab/--seq_len/--n_embd)")
    model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", help="hf-gpt2 safetensors of gtp's iteration 0 (not with --moe_experts: "
                    "the MoE model starts from its own random weights, for speed only)")
    ap.add_argument("--tokens", required=True, help="gtp's train.dump_tokens file")
    ap.add_argument("--n_layer", type=int, default=12)
    ap.add_argument("--n_embd", type=int, default=768)
    ap.add_argument("--n_head", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq_len", type=int, default=1024)
    ap.add_argument("--micro_batch", type=int, default=8)
    ap.add_argument("--global_batch", type=int, default=0, help="0: = micro_batch")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min_lr", type=float, default=6e-5)
    ap.add_argument("--warmup_steps", type=int, default=10)
    ap.add_argument("--decay", choices=["cosine", "linear", "constant"], default="cosine")
    ap.add_argument("--weight_decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--clip_grad", type=float, default=1.0, help="<= 0: no clipping")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--precision", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: f32 smoke tests only")
    ap.add_argument("--peak_tflops", type=float, default=989.0, help="per GPU (H200 dense bf16)")
    ap.add_argument("--skip", type=int, default=10, help="first steps left out of the median")
    ap.add_argument("--json", help="also write the summary JSON here")
    ap.add_argument("--moe_experts", type=int, default=0, help="> 0: every MLP a MoE of this many experts")
    ap.add_argument("--moe_top_k", type=int, default=2)
    ap.add_argument("--moe_ffn", type=int, default=0, help="expert hidden size (0: 4·C)")
    ap.add_argument("--aux_coeff", type=float, default=0.0)
    ap.add_argument("--z_coeff", type=float, default=0.0)
    ap.add_argument("--moe_impl", choices=["auto", "grouped", "loop"], default="auto",
                    help="auto: torch._grouped_mm where this torch has it and the run is bf16 on CUDA")
    a = ap.parse_args()

    B, T, V, L, C = a.micro_batch, a.seq_len, a.vocab, a.n_layer, a.n_embd
    G = a.global_batch or B
    if G % B:
        raise SystemExit(f"torch_gpt: global_batch {G} is not a multiple of micro_batch {B}")
    M = G // B
    per_step = M * 2 * B * T
    have = os.path.getsize(a.tokens) // 4
    if have < a.steps * per_step:
        raise SystemExit(f"torch_gpt: {a.tokens} holds {have} int32, {a.steps} steps of "
                         f"{M} x 2 x [{B}, {T}] need {a.steps * per_step}")
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    if not cuda and a.precision != "f32":
        raise SystemExit("torch_gpt: --device cpu runs --precision f32 only")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    data = torch.from_file(a.tokens, dtype=torch.int32, size=a.steps * per_step)
    data = data.view(a.steps, M, 2, B, T).to(dev, dtype=torch.long)
    if int(data.max()) >= V or int(data.min()) < 0:
        raise SystemExit(f"torch_gpt: token ids outside [0, {V})")

    moe = None
    if a.moe_experts > 0:
        impl = a.moe_impl
        if impl == "auto":
            impl = "grouped" if cuda and a.precision == "bf16" and hasattr(torch, "_grouped_mm") else "loop"
        moe = (a.moe_experts, a.moe_top_k, a.moe_ffn or 4 * C, impl)
        torch.manual_seed(1234)
    model = GPT(V, T, L, C, a.n_head, moe, a.aux_coeff, a.z_coeff)
    if moe is not None:  # GPT-2's init (N(0, 0.02), zero biases), not PyTorch's defaults
        for mod in model.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)
    if moe is None:
        if not a.weights:
            raise SystemExit("torch_gpt: --weights is required (gtp's iteration-0 export)")
        load_hf_gpt2(model, read_safetensors(a.weights), L)
    model.to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    sched = lambda s: lr_at(s, a.lr, a.min_lr, a.warmup_steps, a.steps, a.decay)  # noqa: E731
    opt = torch.optim.AdamW(groups, lr=sched(0), betas=(f32(a.beta1), f32(a.beta2)), eps=f32(a.eps),
                            fused=True)
    fwd = torch.compile(model) if a.mode == "compile" else model
    amp = a.precision == "bf16"
    name = f"torch-{a.mode}" + (f"-moe-{moe[3]}" if moe else "")
    print(f"{name}: torch {torch.__version__} on {device_name}, {a.precision}, "
          f"L={L} C={C} NH={a.n_head} V={V} T={T}, B={B} x {M} micro-batches, {a.steps} steps",
          flush=True)

    losses, norms, times, lrs = [], [], [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        lr = sched(step)
        for g in opt.param_groups:
            g["lr"] = lr
        sync()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        for m in range(M):
            with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=amp):
                loss = fwd(data[step, m, 0], data[step, m, 1])
            (loss / M).backward()
            loss_sum += loss.detach()
        if a.clip_grad > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, a.clip_grad)
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v, norm_v = (loss_sum / M).item(), norm.item()  # the step's one host sync
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        losses.append(loss_v)
        norms.append(norm_v)
        times.append(ms)
        lrs.append(lr)
        print(f"{name} step {step + 1:5d}/{a.steps}  loss {loss_v:.6f}  grad-norm {norm_v:.4f}  "
              f"lr {lr:.4e}  {ms:.2f} ms", flush=True)

    steady = sorted(times[a.skip:] or times)
    med = steady[len(steady) // 2]
    tok_s = G * T / (med / 1e3)
    fpt = flop_per_token(V, T, L, C)
    out = {"run": name, "precision": a.precision, "torch": torch.__version__,
           "device": device_name, "median_ms": med, "tokens_per_s": tok_s,
           "flop_per_token": fpt, "mfu": fpt * tok_s / (a.peak_tflops * 1e12),
           "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
           "losses": losses, "grad_norms": norms, "lrs": lrs, "ms": times}
    line = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
