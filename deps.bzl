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

def gtp_dependencies(gtp_path = "."):
    """Declares the offline stand-ins and the CUDA wrapper.

    Args:
      gtp_path: filesystem path of the gtp checkout, relative to the calling
        workspace's root or absolute ("." inside gtp itself).
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
