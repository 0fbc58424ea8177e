"""Project macros: CUDA objects through nvcc, version headers, GPU tests."""

NVCC = "/usr/local/cuda/bin/nvcc"
NVCC_FLAGS_BEFORE_GENCODE = "-std=c++17 -O3 -Xcompiler -fPIC"
NVCC_FLAGS_AFTER_GENCODE = "--expt-relaxed-constexpr -lineinfo"

# sm_90 machine code and its PTX (which a newer GPU compiles at load time).
GENCODE_SM90 = "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"

# sm_90a: Hopper's architecture-specific instructions (wgmma, setmaxnreg); runs
# on compute capability 9.0 only, so its launchers check the device first.
GENCODE_SM90A = "-gencode=arch=compute_90a,code=sm_90a"

def cuda_library(name, srcs, hdrs = [], deps = [], cuda_deps_hdrs = [], visibility = None, gencode = GENCODE_SM90, **kwargs):
    """Compiles .cu files with nvcc into objects and wraps them in a cc_library.

    Args:
      srcs: .cu files.
      hdrs: public headers of the library (C++-only, includable from .cc).
      deps: cc_library deps whose headers the .cu files include (their hdrs
        must be listed in cuda_deps_hdrs so nvcc sees them in the sandbox).
      cuda_deps_hdrs: header files/filegroups the .cu files include.
      gencode: nvcc's -gencode flags (GENCODE_SM90 or GENCODE_SM90A).
    """
    objs = []
    for src in srcs:
        base = src[:-3] if src.endswith(".cu") else src
        obj = "_objs_cuda/" + name + "/" + base.replace("/", "_") + ".o"
        native.genrule(
            name = name + "_" + base.replace("/", "_") + "_nvcc",
            srcs = [src] + hdrs + cuda_deps_hdrs + ["@local_cuda//:headers_files"],
            outs = [obj],
            cmd = " ".join([NVCC, NVCC_FLAGS_BEFORE_GENCODE, gencode, NVCC_FLAGS_AFTER_GENCODE]) + " -I. -I$(GENDIR) -Iexternal/gtp -I$(GENDIR)/external/gtp -c $(location " + src + ") -o $@",
            tags = ["no-remote"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cudart"],
        visibility = visibility,
        linkstatic = 1,
        alwayslink = 1,
        **kwargs
    )

def version_header(name, version_file, namespace, out):
    """Generates `out`, a header exposing `version_file` (semver) to C++."""
    native.genrule(
        name = name,
        srcs = [version_file],
        outs = [out],
        cmd = "v=$$(tr -d ' \\n' < $(location " + version_file + ")); " +
              "IFS=. read maj min pat <<< \"$$v\"; " +
              "printf '%s\\n' '// Generated from " + version_file + "; do not edit.' '#pragma once' " +
              "'namespace " + namespace + " {' " +
              "\"inline constexpr const char kVersion[] = \\\"$$v\\\";\" " +
              "\"inline constexpr int kVersionMajor = $$maj;\" " +
              "\"inline constexpr int kVersionMinor = $$min;\" " +
              "\"inline constexpr int kVersionPatch = $$pat;\" " +
              "'}  // namespace " + namespace + "' > $@",
    )

def gpu_test(name, tags = [], **kwargs):
    """A cc_test tagged `gpu`; it must GTEST_SKIP with a reason when no GPU is visible."""
    native.cc_test(name = name, tags = tags + ["gpu"], **kwargs)

def emulation_test(name, srcs, deps = [], size = "small", **kwargs):
    """A cc_test that runs CUDA kernel sources on the host warp emulator
    (core/kernels/cuda/testing/warp_emulator.h): `deps` bring the sources
    (textual headers) and the references; GoogleTest's main is added. The
    kernels' `#pragma unroll` is nvcc's, so gcc's unknown-pragma warning is off."""
    native.cc_test(
        name = name,
        srcs = srcs,
        size = size,
        copts = ["-Wno-unknown-pragmas"],
        deps = deps + ["//third_party:gtest_main"],
        **kwargs
    )
