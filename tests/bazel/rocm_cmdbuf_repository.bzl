"""@rocm_cmdbuf over an installed PREFIX, laid out as XLA's repository rule lays it out."""

def _rocm_cmdbuf_repository_impl(ctx):
    prefix = ctx.os.environ.get("ROCM_CMDBUF_PATH", "")
    if not prefix.startswith("/"):
        fail("ROCM_CMDBUF_PATH must be the absolute PREFIX given to ci/install.sh, got '%s'" % prefix)
    build = ctx.path(prefix + "/share/rocm_cmdbuf/BUILD.bazel")
    if not build.exists:
        fail("%s is missing: install the library with ci/install.sh %s" % (build, prefix))
    ctx.symlink(prefix + "/include", "include")
    ctx.symlink(prefix + "/lib", "lib")
    ctx.template("BUILD.bazel", build, {})

rocm_cmdbuf_repository = repository_rule(
    implementation = _rocm_cmdbuf_repository_impl,
    environ = ["ROCM_CMDBUF_PATH"],
    local = True,
)
