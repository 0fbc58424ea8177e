"""axes_matrix(): one test target per (layout, backend) of the axis matrix.

`bazel test //tests/axes/...` lists the matrix; a failing target's name is the
layout, e.g. //tests/axes:gpt_tp2_gtp2_dp1_sp_llama_ucx.
"""

def axes_matrix(name, layouts, backends = ["local", "ucx"]):
    """layouts: list of (tp, gtp, dp, sp, llama) tuples, or (tp, gtp, dp, sp,
    llama, ep, egtp[, etp]) for the MoE model (--moe) on the expert grid
    ETP·EP·EGTP (etp 1 when absent)."""
    for layout in layouts:
        tp, gtp, dp, sp, llama = layout[:5]
        base = "%s_tp%d_gtp%d_dp%d%s%s" % (name, tp, gtp, dp, "_sp" if sp else "", "_llama" if llama else "_gpt2")
        flags = ["--tp=%d" % tp, "--gtp=%d" % gtp, "--dp=%d" % dp]
        if sp:
            flags.append("--sp")
        if llama:
            flags.append("--llama")
        if len(layout) >= 7:
            ep, egtp = layout[5], layout[6]
            etp = layout[7] if len(layout) > 7 else 1
            base += "_ep%d_egtp%d" % (ep, egtp) + ("_etp%d" % etp if etp > 1 else "")
            flags += ["--moe", "--ep=%d" % ep, "--egtp=%d" % egtp, "--etp=%d" % etp, "--steps=10"]
        for backend in backends:
            native.sh_test(
                name = base + "_" + backend,
                srcs = ["run_cell.sh"],
                args = [backend, str(tp * gtp * dp), "$(location :axes_check)", "$(location //tools/gtprun)"] + flags,
                data = [":axes_check", "//tools/gtprun"],
                tags = ["axes", backend],
            )

def pp_matrix(name, layouts, backends = ["local", "ucx"]):
    """layouts: (tp, gtp, dp, pp, vpp, micro_batches, sp, llama) tuples; the
    model has pp·vpp layers (at least 2) and every cell trains 10 steps.

    GPT-2 cells (tied embeddings) compare parameters within 1e-3: the tied
    weight's gradient is the sum of the first stage's embedding part and the
    last stage's head part, added in another order than on one rank
    ((h0 + e0) + (h1 + e1) there, (e0 + e1) + (h0 + h1) here), and SGD at
    lr 0.5 amplifies that rounding over 10 steps (4 steps: within 1e-5).
    Losses are compared within 1e-5 in every cell."""
    for tp, gtp, dp, pp, vpp, mb, sp, llama in layouts:
        base = "%s_tp%d_gtp%d_dp%d_pp%d_vpp%d_mb%d%s%s" % (name, tp, gtp, dp, pp, vpp, mb, "_sp" if sp else "", "_llama" if llama else "_gpt2")
        flags = ["--tp=%d" % tp, "--gtp=%d" % gtp, "--dp=%d" % dp, "--pp=%d" % pp, "--vpp=%d" % vpp,
                 "--micro_batches=%d" % mb, "--layers=%d" % max(2, pp * vpp), "--steps=10"]
        if not llama:
            flags.append("--param_tol=1e-3")
        if sp:
            flags.append("--sp")
        if llama:
            flags.append("--llama")
        for backend in backends:
            native.sh_test(
                name = base + "_" + backend,
                srcs = ["run_cell.sh"],
                args = [backend, str(tp * gtp * dp * pp), "$(location :axes_check)", "$(location //tools/gtprun)"] + flags,
                data = [":axes_check", "//tools/gtprun"],
                tags = ["axes", backend],
            )

def cp_matrix(name, layouts, backends = ["local", "ucx"]):
    """layouts: (tp, gtp, dp, pp, cp, micro_batches[, ep, egtp, aux]) tuples,
    GPT-2 style (learned positions), 10 steps. Losses within 1e-5; parameters
    within 1e-4 (ring attention sums the key blocks in another order than one
    rank: CP2 after 10 steps is 2.8e-5 off, after 4 within 1e-5), 1e-3 with PP
    (see pp_matrix). With ep, egtp: the MoE model (--moe: layer 0 of 8 experts,
    top-2) with its experts on the expert grid EP·EGTP (ETP 1); aux: its
    load-balancing loss, "lane", "seq" or "" for none (--moe_aux)."""
    for layout in layouts:
        tp, gtp, dp, pp, cp, mb = layout[:6]
        base = "%s_tp%d_gtp%d_dp%d_pp%d_cp%d_mb%d" % (name, tp, gtp, dp, pp, cp, mb)
        flags = ["--tp=%d" % tp, "--gtp=%d" % gtp, "--dp=%d" % dp, "--pp=%d" % pp, "--cp=%d" % cp,
                 "--micro_batches=%d" % mb, "--layers=%d" % max(2, pp), "--steps=10",
                 "--param_tol=%s" % ("1e-3" if pp > 1 else "1e-4")]
        if len(layout) > 6:
            ep, egtp, aux = layout[6:9]
            base += "_ep%d_egtp%d%s" % (ep, egtp, "_aux_" + aux if aux else "")
            flags += ["--moe", "--ep=%d" % ep, "--egtp=%d" % egtp]
            if aux:
                flags.append("--moe_aux=" + aux)
        for backend in backends:
            native.sh_test(
                name = base + "_" + backend,
                srcs = ["run_cell.sh"],
                args = [backend, str(tp * gtp * dp * pp * cp), "$(location :axes_check)", "$(location //tools/gtprun)"] + flags,
                data = [":axes_check", "//tools/gtprun"],
                tags = ["axes", backend],
            )

def hybrid_matrix(name, layouts, backends = ["local", "ucx"]):
    """layouts: (tag, tp, gtp, dp, pp, pattern[, ep, egtp[, vpp, micro_batches[,
    cp, model_flags]]]) tuples: model_flags, a list of axes_check's model
    flags (--heads, --seq, ...) for the sizes CP needs (T a multiple of 2·CP,
    Mamba heads per TP rank of CP); a hybrid Mamba / attention / MLP (/ MoE when ep·egtp > 1) stack
    of Megatron's layer pattern (`|` splits the pipeline's virtual stages:
    pp·vpp parts), 4 SGD steps (2 with several micro-batches, below); losses
    within 1e-5 of one rank, parameters
    within 5e-5 (the scan's exponential decays amplify TP's other summation
    order: TP2 cells land 1.1e-5 – 3e-5 off after 4 steps at lr 0.5, GTP-only
    cells within 1e-5). Stages recompute their Mamba layers once a step has
    several micro-batches."""
    for layout in layouts:
        tag, tp, gtp, dp, pp, pattern = layout[:6]
        ep, egtp = (layout[6], layout[7]) if len(layout) > 6 else (1, 1)
        vpp, mb = (layout[8], layout[9]) if len(layout) > 8 else (1, 1)
        cp, model_flags = (layout[10], layout[11]) if len(layout) > 10 else (1, [])
        base = "%s_%s_tp%d_gtp%d_dp%d_pp%d" % (name, tag, tp, gtp, dp, pp)
        if cp > 1:
            base += "_cp%d" % cp
        if vpp > 1:
            base += "_vpp%d" % vpp
        if mb > 1:
            base += "_mb%d" % mb
        # Several micro-batches add summation orders that 4 steps at lr 0.5
        # carry past 5e-5 on small, zero-initialised biases with some BLAS
        # kernels (9.6e-5 with OpenBLAS's Haswell ones, losses within 1e-6):
        # those cells train 2 steps at 1e-4, the fuzzer's setting (its largest
        # drift over 450 layouts after 2 steps: 1.3e-5; fuzz_layouts.py).
        steps, param_tol = ("4", "5e-5") if mb == 1 else ("2", "1e-4")
        flags = ["--tp=%d" % tp, "--gtp=%d" % gtp, "--dp=%d" % dp, "--pp=%d" % pp,
                 "--vpp=%d" % vpp, "--micro_batches=%d" % mb, "--cp=%d" % cp,
                 "--pattern=" + pattern, "--steps=" + steps, "--param_tol=" + param_tol] + model_flags
        if ep * egtp > 1:
            flags += ["--moe", "--ep=%d" % ep, "--egtp=%d" % egtp]
        if tag == "sp":  # sequence parallelism (Mamba layers gather rows before in_proj)
            flags.append("--sp")
        for backend in backends:
            native.sh_test(
                name = base + "_" + backend,
                srcs = ["run_cell.sh"],
                args = [backend, str(tp * gtp * dp * pp * cp), "$(location :axes_check)", "$(location //tools/gtprun)"] + flags,
                data = [":axes_check", "//tools/gtprun"],
                tags = ["axes", backend],
            )
