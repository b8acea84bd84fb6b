#!/usr/bin/env bash
# Builds and runs tests/bazel against an installed library, the way XLA consumes it: installs
# Debian's Bazel (bazel-bootstrap) with its rules_cc and rules_java, installs the library into a
# temporary PREFIX with ci/install.sh, and runs `bazel test` offline, @rocm_cmdbuf being made from
# ROCM_CMDBUF_PATH=PREFIX and the installed bazel/rocm_cmdbuf.BUILD; the headers-only test opens
# the library at run time, as the patched XLA does, from the loader's path (LD_LIBRARY_PATH).
# Options after the script's name go to ci/install.sh (--debug). Bazel's output root, the PREFIX
# and every generated file live in one temporary directory, removed at the end; nothing is
# written in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/apt-install.sh bazel-bootstrap bazel-rules-cc bazel-rules-java
rules_cc=$(dpkg -L bazel-rules-cc | sed -n 's|/cc/defs\.bzl$||p')
rules_java=$(dpkg -L bazel-rules-java | sed -n 's|/java/defs\.bzl$||p')

tmp=$(mktemp -d)
bazel=(bazel --output_user_root="$tmp/bazel" --nohome_rc --host_jvm_args=-XX:-UsePerfData)
cleanup() {
    (cd tests/bazel && "${bazel[@]}" shutdown) >/dev/null 2>&1 || true
    chmod -R u+w "$tmp" && rm -rf "$tmp"
}
trap cleanup EXIT

bash ci/install.sh "$tmp/prefix" "$@"
version=$(readlink "$tmp/prefix/lib/librocm_cmdbuf.so.0")
version=${version#librocm_cmdbuf.so.}

# Debian's rules_cc (0.0.4) loads use_cpp_toolchain, which bazel-bootstrap 4.2.3's @bazel_tools
# does not have yet; a copy that names the C++ toolchain type directly works with it.
cp -r "$rules_cc" "$tmp/rules_cc"
sed -i -e 's/, "use_cpp_toolchain")/)/' \
    -e 's|toolchains = use_cpp_toolchain(),|toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],|' \
    "$tmp/rules_cc/cc/private/rules_impl/compiler_flag.bzl" \
    "$tmp/rules_cc/cc/private/rules_impl/cc_flags_supplier.bzl"
# `bazel test` depends on @remote_coverage_tools, which Bazel would download; no coverage here.
mkdir -p "$tmp/coverage_tools"
touch "$tmp/coverage_tools/WORKSPACE"
printf '#!/bin/sh\necho "no coverage in this offline workspace" >&2\nexit 1\n' > "$tmp/coverage_tools/none.sh"
chmod +x "$tmp/coverage_tools/none.sh"
printf 'sh_binary(name = "coverage_report_generator", srcs = ["none.sh"], visibility = ["//visibility:public"])\n' \
    > "$tmp/coverage_tools/BUILD"

echo "bazel-bootstrap $(dpkg-query -W -f='${Version}' bazel-bootstrap), rocm_cmdbuf $version"
cd tests/bazel
"${bazel[@]}" test //... \
    --symlink_prefix=/ --nosandbox_debug --noshow_progress --color=no --curses=no \
    --override_repository=rules_cc="$tmp/rules_cc" \
    --override_repository=rules_java="$rules_java" \
    --override_repository=remote_coverage_tools="$tmp/coverage_tools" \
    --repo_env=ROCM_CMDBUF_PATH="$tmp/prefix" \
    --test_env=RCB_EXPECTED_VERSION="$version" \
    --test_env=LD_LIBRARY_PATH="$tmp/prefix/lib" \
    --test_output=all
