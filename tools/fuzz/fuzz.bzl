"""gtp_fuzzer: one libFuzzer target, and a test replaying its seeds.

With --config=fuzz (clang, tools/fuzz/run.sh) the binary links libFuzzer's
main; otherwise it links replay_main.cc, which runs each file or directory
given on the command line through LLVMFuzzerTestOneInput once, so the normal
toolchain builds every harness and `bazel test //...` replays its seeds.
"""

def gtp_fuzzer(name, srcs, deps, corpus):
    native.cc_binary(
        name = name,
        srcs = srcs,
        deps = deps + [":fuzz_util"] + select({
            ":libfuzzer": [],
            "//conditions:default": [":replay_main"],
        }),
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.sh_test(
        name = name + "_seeds_test",
        size = "small",
        srcs = ["replay_test.sh"],
        args = ["$(location :%s)" % name, "tools/fuzz/" + corpus],
        data = [":" + name] + native.glob([corpus + "/**"]),
    )
