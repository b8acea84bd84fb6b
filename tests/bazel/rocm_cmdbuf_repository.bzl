"""@rocm_cmdbuf over an installed PREFIX, for a Bazel project: ROCM_CMDBUF_PATH=PREFIX,
PREFIX/include and PREFIX/lib symlinked, PREFIX/share/rocm_cmdbuf/BUILD.bazel as the BUILD file.
XLA's own rule (xla-patches/ 0001) takes only the two headers and writes its own BUILD file. This
one fails when ROCM_CMDBUF_PATH is unset: this workspace exists to test the library."""

def _rocm_cmdbuf_repository_impl(ctx):
    prefix = ctx.os.environ.get("ROCM_CMDBUF_PATH", "").strip()
    if not prefix.startswith("/"):
        fail("ROCM_CMDBUF_PATH must be the absolute PREFIX given to ci/install.sh, got '%s'" % prefix)
    build = ctx.path(prefix + "/share/rocm_cmdbuf/BUILD.bazel")
    for required in [build, ctx.path(prefix + "/include/rocm_cmdbuf.h"), ctx.path(prefix + "/lib/librocm_cmdbuf.so.0")]:
        if not required.exists:
            fail("%s is missing: install the library with ci/install.sh %s" % (required, prefix))
    ctx.symlink(prefix + "/include", "include")
    ctx.symlink(prefix + "/lib", "lib")
    ctx.symlink(build, "BUILD.bazel")

rocm_cmdbuf_repository = repository_rule(
    implementation = _rocm_cmdbuf_repository_impl,
    environ = ["ROCM_CMDBUF_PATH"],
    local = True,
    configure = True,
)
