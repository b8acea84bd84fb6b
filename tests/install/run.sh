#!/usr/bin/env bash
# The installed library as its users see it. Installs cmake and pkg-config when missing, installs
# the library with ci/install.sh into a temporary PREFIX (options after the script's name go to
# it: --debug), and checks:
#   - the installed files are exactly the documented ones, the headers, licences and changelog
#     equal the committed ones,
#     a second install over the same PREFIX changes nothing, and a DESTDIR install stages the same
#     files naming the final PREFIX;
#   - both installed libraries pass ci/check-library.sh (exports, SONAME, no RPATH/RUNPATH, ...);
#   - the installed rcb-doctor finds the software GPU usable;
#   - consumer.c, built with `pkg-config --cflags --libs rocm_cmdbuf`, and consumer.cpp, built by
#     CMakeLists.txt with find_package(rocm_cmdbuf CONFIG REQUIRED) after PREFIX has been moved
#     (the CMake package is relocatable; pkg-config --define-prefix follows the move too), both run on the software GPU (tests/hipsim, built in the
#     dev profile: it only stands in for the GPU) and check device memory.
#   - the pkg-config bounds docs/c-api.md gives take 0.x from 0.1.0 and refuse 0.0.x and 1.0.0.
# Everything is built and run in one temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
bash ci/apt-install.sh cmake pkg-config

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
bash ci/install.sh "$prefix" "$@"

listing() { # DIR: every file and link under DIR with its checksum (a link: its target)
    (cd "$1" && find . \( -type f -o -type l \) | sort | while read -r f; do
        if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else echo "$f $(sha256sum < "$f" | cut -c1-16)"; fi
    done)
}
expected="./bin/rcb-doctor
./include/rocm_cmdbuf.h
./include/rocm_cmdbuf.hpp
./lib/cmake/rocm_cmdbuf/rocm_cmdbufConfig.cmake
./lib/cmake/rocm_cmdbuf/rocm_cmdbufConfigVersion.cmake
./lib/librocm_cmdbuf.so
./lib/librocm_cmdbuf.so.0
./lib/librocm_cmdbuf.so.$version
./lib/librocm_cmdbuf_preload.so
./lib/librocm_cmdbuf_preload.so.0
./lib/librocm_cmdbuf_preload.so.$version
./lib/pkgconfig/rocm_cmdbuf.pc
./share/doc/rocm_cmdbuf/CHANGELOG.md
./share/doc/rocm_cmdbuf/LICENSE-APACHE
./share/doc/rocm_cmdbuf/LICENSE-MIT
./share/rocm_cmdbuf/BUILD.bazel"
first=$(listing "$prefix")
if [ "$(awk '{print $1}' <<<"$first")" != "$expected" ]; then
    echo "installed files differ from the documented layout (< installed, > expected):"
    diff <(awk '{print $1}' <<<"$first") <(echo "$expected") || true
    exit 1
fi
for header in rocm_cmdbuf.h rocm_cmdbuf.hpp; do
    cmp "include/$header" "$prefix/include/$header"
done
for doc in LICENSE-MIT LICENSE-APACHE CHANGELOG.md; do
    cmp "$doc" "$prefix/share/doc/rocm_cmdbuf/$doc"
done
bash ci/install.sh "$prefix" "$@" >/dev/null
[ "$(listing "$prefix")" = "$first" ] || { echo "a second install over $prefix changed it"; exit 1; }
DESTDIR="$tmp/stage" bash ci/install.sh /usr/local "$@" >/dev/null
[ "$(listing "$tmp/stage/usr/local" | awk '{print $1}')" = "$expected" ] &&
    grep -qx 'prefix=/usr/local' "$tmp/stage/usr/local/lib/pkgconfig/rocm_cmdbuf.pc" ||
    { echo "DESTDIR=$tmp/stage ci/install.sh /usr/local staged something else"; exit 1; }
echo "installed layout, headers, a second install and a DESTDIR install: as documented"
bash ci/check-library.sh "$prefix/lib"

# The software GPU in a directory of its own under its SONAME: the program links it, and the
# library's dlopen of RCB_HIP_LIBRARY (the same file) shares that one instance.
cargo build --quiet -p hipsim
mkdir "$tmp/hip"
cp "${CARGO_TARGET_DIR:-target}/debug/libamdhip64.so" "$tmp/hip/libamdhip64.so"
ln -s libamdhip64.so "$tmp/hip/libamdhip64.so.6"
gpu=(RCB_BACKEND=hip RCB_HIP_LIBRARY="$tmp/hip/libamdhip64.so")
links_soname() { readelf -d "$1" | grep -q 'NEEDED.*\[librocm_cmdbuf\.so\.0\]' || { echo "$1 does not need librocm_cmdbuf.so.0"; exit 1; }; }

echo "== the installed rcb-doctor on the software GPU"
env "${gpu[@]}" "$prefix/bin/rcb-doctor" >"$tmp/doctor.log" 2>&1 || { cat "$tmp/doctor.log"; echo "rcb-doctor failed"; exit 1; }
grep -q '^  0: hipsim, arch hipsim, ' "$tmp/doctor.log" && grep -q '^rcb-doctor: usable' "$tmp/doctor.log" ||
    { cat "$tmp/doctor.log"; echo "rcb-doctor did not find the software GPU usable"; exit 1; }
grep -E '^  (0|budget|rcb_cmdbuf_new, rcb_cmdbuf_free):' "$tmp/doctor.log"

echo "== pkg-config: consumer.c"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pc_version=$(pkg-config --modversion rocm_cmdbuf)
[ "$pc_version" = "$version" ] || { echo "pkg-config says $pc_version, Cargo.toml $version"; exit 1; }
echo "pkg-config --cflags --libs rocm_cmdbuf: $(pkg-config --cflags --libs rocm_cmdbuf)"
# The bounds docs/c-api.md tells a pkg-config user to name (pkg-config knows no major version):
# they take the installed .pc and a later 0.x, and refuse an older 0.0.x and the next major.
bounds=('rocm_cmdbuf >= 0.1.0' 'rocm_cmdbuf < 1')
pkg-config --exists "${bounds[@]}" || { echo "pkg-config refuses the installed $pc_version within ${bounds[*]}"; exit 1; }
for v in 0.0.9 0.7.3 1.0.0; do
    mkdir -p "$tmp/pc-$v"
    sed "s/^Version: .*/Version: $v/" "$prefix/lib/pkgconfig/rocm_cmdbuf.pc" > "$tmp/pc-$v/rocm_cmdbuf.pc"
    if PKG_CONFIG_PATH="$tmp/pc-$v" pkg-config --exists "${bounds[@]}"; then taken=yes; else taken=no; fi
    want=no; [ "$v" = 0.7.3 ] && want=yes
    [ "$taken" = "$want" ] || { echo "pkg-config ${bounds[*]} on a .pc of $v: taken=$taken, expected $want"; exit 1; }
done
echo "pkg-config bounds ${bounds[*]}: take $pc_version and 0.7.3, refuse 0.0.9 and 1.0.0"
# shellcheck disable=SC2046 # the flags are words
gcc -std=c11 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__ -DRCB_EXPECTED_VERSION="\"$pc_version\"" \
    -o "$tmp/c-consumer" tests/install/consumer.c $(pkg-config --cflags --libs rocm_cmdbuf) -L"$tmp/hip" -lamdhip64
links_soname "$tmp/c-consumer"
env LD_LIBRARY_PATH="$prefix/lib:$tmp/hip" "${gpu[@]}" "$tmp/c-consumer"

echo "== CMake: consumer.cpp, PREFIX moved first"
mv "$prefix" "$tmp/moved"
moved_flags=$(PKG_CONFIG_PATH="$tmp/moved/lib/pkgconfig" pkg-config --define-prefix --cflags --libs rocm_cmdbuf)
[[ "$moved_flags" == "-I$tmp/moved/include -L$tmp/moved/lib -lrocm_cmdbuf"* ]] ||
    { echo "pkg-config --define-prefix after the move: $moved_flags"; exit 1; }
cmake -S tests/install -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/moved" -DRCB_EXPECTED_PREFIX="$tmp/moved" \
    -DHIP_LIBRARY="$tmp/hip/libamdhip64.so" -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake.log" ||
    { cat "$tmp/cmake.log"; exit 1; }
grep -- '-- rocm_cmdbuf' "$tmp/cmake.log"
cmake --build "$tmp/build" > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
links_soname "$tmp/build/consumer"
env "${gpu[@]}" "$tmp/build/consumer"
echo "install test passed in $((SECONDS - start)) s ($(cmake --version | head -1), pkg-config $(pkg-config --version))"
