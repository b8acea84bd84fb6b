#!/usr/bin/env bash
# Programs built against earlier versions of the ABI, run against the libraries in $1
# (target/<profile>, after cargo build -p rocm_cmdbuf -p rocm_cmdbuf_preload -p hipsim):
#   - old_consumer.c, built against old/rocm_cmdbuf.h, the header of the previous ABI, and linked
#     as programs were then: against a stand-in of that library made from that header (with
#     old/librocm_cmdbuf.map, the version script of that release, where old/ has one; the library
#     before 0.1.0 had none). It runs against the library of $1 on the software GPU and checks
#     what a program of that header must get (its comment says what).
#   - hip_user.c, linked against Debian's real libamdhip64.so.5 (ROCm 5.2, whose functions carry
#     symbol versions): with librocm_cmdbuf_preload.so preloaded, each of its five HIP references
#     must bind to the preload, whose interposers are unversioned for that reason (preload/build.rs).
# When a release changes the ABI, old/ takes the header (and version script) of the release before
# it, and old_consumer.c what that header's programs are promised.
set -euo pipefail
lib_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/../../ci/apt-install.sh" libamdhip64-dev gcc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The stand-in of the previous library: every function of its header, under its SONAME.
mkdir "$work/then" "$work/now" "$work/hip"
perl -0ne 's{/\*.*?\*/}{}gs; while (/^(?:const )?[a-z_]+ \**(rcb_\w+)\(/mg) { print "void $1(void) {}\n" }' \
    "$here/old/rocm_cmdbuf.h" >"$work/then.c"
versions=()
[ ! -f "$here/old/librocm_cmdbuf.map" ] || versions=(-Wl,--version-script="$here/old/librocm_cmdbuf.map")
gcc -shared -fPIC -o "$work/then/librocm_cmdbuf.so" "$work/then.c" -Wl,-soname,librocm_cmdbuf.so.0 "${versions[@]}"
cp "$lib_dir/librocm_cmdbuf.so" "$work/now/librocm_cmdbuf.so.0"
cp "$lib_dir/libamdhip64.so" "$work/hip/libamdhip64.so"
ln -s libamdhip64.so "$work/hip/libamdhip64.so.6"
gcc -std=c11 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__ -I"$here/old" -o "$work/old_consumer" \
    "$here/old_consumer.c" -L"$work/then" -lrocm_cmdbuf -L"$work/hip" -lamdhip64 -ldl
failed=0
if LD_LIBRARY_PATH="$work/now:$work/hip" RCB_BACKEND=hip RCB_HIP_LIBRARY="$work/hip/libamdhip64.so" \
    "$work/old_consumer"; then :; else
    echo "FAIL: a program of the previous header against this library"
    failed=1
fi

gcc -std=c11 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__ -o "$work/hip_user" "$here/hip_user.c" \
    /usr/lib/x86_64-linux-gnu/libamdhip64.so.5
bindings=$(LD_PRELOAD="$lib_dir/librocm_cmdbuf_preload.so" LD_BIND_NOW=1 LD_DEBUG=bindings "$work/hip_user" 2>&1 |
    grep "binding file $work/hip_user " || true)
for f in hipDeviceReset hipStreamCreate hipStreamCreateWithFlags hipStreamCreateWithPriority hipStreamDestroy; do
    line=$(grep "symbol \`$f' " <<<"$bindings" || true)
    if grep -q "librocm_cmdbuf_preload.so \[0\]: normal symbol \`$f' \[hip_" <<<"$line"; then
        echo "PASS $f@$(sed -n "s/.*\[\(hip_[^]]*\)\]$/\1/p" <<<"$line") of the real HIP binds to the preload"
    else
        echo "FAIL $f of the real HIP does not bind to the preload: ${line:-no binding}"
        failed=1
    fi
done
exit $failed
