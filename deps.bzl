"""gtp_dependencies(): the external repositories gtp needs, all local.

A consumer workspace does:

    local_repository(name = "gtp", path = "/path/to/gtp")
    load("@gtp//:deps.bzl", "gtp_dependencies")
    gtp_dependencies(gtp_path = "/path/to/gtp")

and then depends on single packages, e.g. "@gtp//core".
Everything here is offline: Debian packages and /usr/local/cuda.
"""

def _maybe(rule, name, **kwargs):
    if name not in native.existing_rules():
        rule(name = name, **kwargs)

def gtp_dependencies(gtp_path = ".", absl_src = "/opt/gtp/abseil-20220623.1"):
    """Declares the offline stand-ins, the CUDA wrapper and abseil's source.

    Args:
      gtp_path: filesystem path of the gtp checkout, relative to the calling
        workspace's root or absolute ("." inside gtp itself).
      absl_src: abseil's source tree (Debian's source package, unpacked by
        tools/setup.sh). Only --config=tsan builds it; other builds never
        fetch @com_google_absl, so the directory may be missing for them.
    """
    _maybe(
        native.local_repository,
        name = "rules_cc",
        path = gtp_path + "/third_party/stand_ins/rules_cc",
    )
    _maybe(
        native.local_repository,
        name = "remote_coverage_tools",
        path = gtp_path + "/third_party/stand_ins/remote_coverage_tools",
    )
    _maybe(native.local_repository, name = "rules_java", path = "/usr/share/bazel/rules/java")
    _maybe(native.local_repository, name = "platforms", path = "/usr/share/bazel/tools/platforms")
    _maybe(
        native.new_local_repository,
        name = "local_cuda",
        path = "/usr/local/cuda",
        build_file = "@gtp//third_party:cuda.BUILD",
    )

    # ThreadSanitizer only (//third_party:absl selects it under --config=tsan): abseil built from
    # source with -fsanitize=thread. Its own WORKSPACE would download test dependencies, so the
    # tree is a plain local repository; its BUILD files load skylib (Debian's bazel-skylib).
    _maybe(native.local_repository, name = "bazel_skylib", path = "/usr/share/bazel/tools/skylib")
    _maybe(native.local_repository, name = "com_google_absl", path = absl_src)
