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
