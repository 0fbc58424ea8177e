"""gtp's formulas in Python (stdlib only), for the PyTorch side of the bench.

  flop_per_token   recipes/trainer/mfu.cc for GPT-2 shapes
  lr_at            optimizer/lr_schedule.cc LrAt with the schedule trainer.cc builds
"""
import math
import struct


def f32(x):
    """x rounded to float32, as gtp's float config fields and LrAt hold it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def flop_per_token(vocab, seq_len, n_layer, n_embd):
    """Training FLOP per token of GPT-2 (tied, learned positions, biases, 4C MLP).

    6·N + 12·L·C·T with N every parameter except the position embedding, the
    tied embedding once, over the real vocabulary (PaLM / nanoGPT), as
    recipes/trainer/mfu.cc counts it. GPT-2 124M: 855,166,464.
    """
    V, T, L, C = vocab, seq_len, n_layer, n_embd
    per_layer = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    n = V * C + L * per_layer + 2 * C  # + ln_f
    return 6.0 * n + 12.0 * L * C * T


def lr_at(step, lr, min_lr, warmup_steps, steps, decay="cosine"):
    """The lr of the optimizer step after `step` (0-based) completed ones.

    trainer.cc: max_lr = optim.lr, warmup = min(optim.warmup_steps,
    train.steps), decay_steps = train.steps. LrAt: warmup max·(s+1)/W, then
    p = (s − W)/(decay_steps − W) clamped to [0, 1]; cosine
    min + (max − min)·(1 + cos πp)/2, linear max − (max − min)·p.
    """
    max_lr, min_lr = f32(lr), f32(min_lr)
    warmup = min(warmup_steps, steps)
    if step < warmup:
        return f32(max_lr * ((step + 1) / warmup))
    if decay == "constant":
        return max_lr
    span = steps - warmup
    p = 1.0 if span <= 0 else min(max((step - warmup) / span, 0.0), 1.0)
    rng = max_lr - min_lr
    if decay == "cosine":
        return f32(min_lr + rng * 0.5 * (1.0 + math.cos(math.pi * p)))
    return f32(max_lr - rng * p)
