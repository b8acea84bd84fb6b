#!/usr/bin/env bash
# rcb-doctor on the software GPU: usage `tests/doctor/run.sh target/<profile>` (the directory
# holding rcb-doctor and libamdhip64.so, from cargo build --bin rcb-doctor -p hipsim). Checks that
#   - under the software GPU's kernel-argument leak it exits 0 and names the device's architecture
#     (hipsim) and the growth the library measured (320 bytes per node update, the model's slot),
#     which does not lower the charge below the fixed estimate of 5920 bytes;
#   - with --device 1 it makes the command buffer on device 1 and says the budget was measured on
#     the thread's current device, 0;
#   - without the leak it reports HIP's fixed default, having measured no growth (the memset probe
#     cannot show kernel-node growth);
#   - RCB_EXEC_UPDATE_BUDGET=0 and RCB_STREAM_CACHE=0 each get their advice line;
#   - a runtime inside a ROCm tree whose .info/version says 7.2.0 gets the 7.2.0 advice, and one
#     saying 7.2.1 does not;
#   - a runtime without hipThreadExchangeStreamCaptureMode (a copy of the software GPU whose
#     dynamic string table misspells it) gets the fixed default, not measured, with the reason
#     and its advice line;
#   - no device, no runtime and a malformed variable exit 1 with the reason on the last line.
# Exits non-zero on any failure.
set -euo pipefail
dir=$(cd "$1" && pwd)
doctor=$dir/rcb-doctor
sim=$dir/libamdhip64.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# Runs the doctor with the given environment; its output in $tmp/out, its status in $rc.
run() {
    rc=0
    env "$@" "$doctor" >"$tmp/out" 2>&1 || rc=$?
}
expect() { # description status pattern...
    local what=$1 want=$2
    shift 2
    if [ "$rc" != "$want" ]; then
        echo "FAIL: $what: exit $rc, expected $want"
        cat "$tmp/out"
        failed=1
        return
    fi
    for pattern in "$@"; do
        if ! grep -Eq -- "$pattern" "$tmp/out"; then
            echo "FAIL: $what: no line matches '$pattern'"
            cat "$tmp/out"
            failed=1
            return
        fi
    done
    echo "ok: $what"
}
refuse() { # description pattern: no line may match
    if grep -Eq -- "$2" "$tmp/out"; then
        echo "FAIL: $1: a line matches '$2'"
        cat "$tmp/out"
        failed=1
    fi
}

hip=(RCB_BACKEND=hip RCB_HIP_LIBRARY="$sim")
run "${hip[@]}" HIPSIM_QUIRKS=kernarg_leak
expect "the software GPU with the leak" 0 '^  0: hipsim, arch hipsim, ' \
    '^  measured: 320 bytes per node update' '^  budget: 64 MiB: device 0.s memory grew 320 bytes' \
    '^  charge per node push: its argument bytes plus 5920 bytes' \
    '^  chosen because: RCB_BACKEND=hip; RCB_HIP_LIBRARY=' '^  device properties: hipGetDevicePropertiesR0600' \
    '^rcb-doctor: usable'
cp "$tmp/out" "$tmp/leak.out"

# --device 1 makes the command buffer there; the budget is measured, as in any process, on the
# thread's current device, which the report names.
rc=0
env "${hip[@]}" HIPSIM_QUIRKS=kernarg_leak "$doctor" --device 1 >"$tmp/out" 2>&1 || rc=$?
expect "--device 1" 0 '^  measured: 320 bytes per node update, .* on device 0 \(the thread.s current device\)' \
    '^  rcb_cmdbuf_new, rcb_cmdbuf_free: ok on device 1'

run "${hip[@]}"
expect "the software GPU without the leak" 0 '^  budget: 64 MiB, the fixed default: device 0.s memory did not grow over 16384 memset-node updates' \
    '^  measured: 0 bytes per node update' '^rcb-doctor: usable'

run "${hip[@]}" RCB_EXEC_UPDATE_BUDGET=0 RCB_STREAM_CACHE=0
expect "the budget and the stream cache turned off" 0 '^  budget: off, set by RCB_EXEC_UPDATE_BUDGET' \
    '^  advice: RCB_EXEC_UPDATE_BUDGET=0: nothing bounds' '^  advice: every stream the library hands out is created' \
    '^rcb-doctor: usable \(3 advice'
refuse "the budget set by the variable" '^  measured:'

# A runtime in a ROCm tree, which the doctor finds through the file mapped into the process.
for release in 7.2.0-43 7.2.1-81; do
    rocm=$tmp/rocm-$release
    mkdir -p "$rocm/lib" "$rocm/.info"
    cp "$sim" "$rocm/lib/libamdhip64.so"
    echo "$release" >"$rocm/.info/version"
    run RCB_BACKEND=hip RCB_HIP_LIBRARY="$rocm/lib/libamdhip64.so"
    case $release in
        7.2.0*) expect "ROCm $release" 0 "^  ROCm release: $release" '^  advice: ROCm 7.2.0 has a ROCr crash .*: use 7.2.1 or later' ;;
        *) expect "ROCm $release" 0 "^  ROCm release: $release"; refuse "ROCm $release" 'ROCr crash' ;;
    esac
done
run "${hip[@]}" HIPSIM_VERSION=60443484
expect "HIP 6.4" 0 '^  version: HIP 6\.4\.43484'
refuse "HIP 6.4" 'ROCr crash'

# The copy: the name's entry in .dynstr (the string table of the dynamic symbol table, SHT_DYNSYM)
# gets another first letter, so the loader cannot find it; hipsim calls its own code directly.
python3 - "$sim" "$tmp/without/libamdhip64.so" hipThreadExchangeStreamCaptureMode <<'PY'
import os, struct, sys
src, dst, name = sys.argv[1], sys.argv[2], sys.argv[3].encode()
elf = bytearray(open(src, 'rb').read())
shoff, = struct.unpack_from('<Q', elf, 0x28)
shentsize, shnum = struct.unpack_from('<HH', elf, 0x3a)
headers = [shoff + i * shentsize for i in range(shnum)]
dynsym = next(h for h in headers if struct.unpack_from('<I', elf, h + 4)[0] == 11)
dynstr = headers[struct.unpack_from('<I', elf, dynsym + 0x28)[0]]
start, size = struct.unpack_from('<QQ', elf, dynstr + 0x18)
at = elf.find(b'\0' + name + b'\0', start, start + size)
assert at >= 0, f'{src} exports no {name.decode()}'
elf[at + 1] = ord('_')
os.makedirs(os.path.dirname(dst), exist_ok=True)
open(dst, 'wb').write(elf)
PY
run RCB_BACKEND=hip RCB_HIP_LIBRARY="$tmp/without/libamdhip64.so"
expect "a runtime without hipThreadExchangeStreamCaptureMode" 0 \
    '^  budget: 64 MiB, the fixed default: not measured \(this HIP runtime has no hipThreadExchangeStreamCaptureMode' \
    '^  advice: the growth was not measured' '^rcb-doctor: usable'
refuse "a runtime without hipThreadExchangeStreamCaptureMode" '^  measured:'

run "${hip[@]}" HIPSIM_DEVICES=0
expect "no device" 1 '^  advice: no GPU is visible' '^rcb-doctor: NOT usable: .*sees no device'
run RCB_BACKEND=hip RCB_HIP_LIBRARY="$tmp/none/libamdhip64.so"
expect "no runtime" 1 '^  advice: install ROCm.s HIP runtime' '^rcb-doctor: NOT usable: RCB_HIP_LIBRARY=.* cannot be loaded'
run RCB_BACKEND=rocm
expect "a malformed variable" 1 '^rcb-doctor: NOT usable: environment variable RCB_BACKEND is "rocm"'

if [ $failed -ne 0 ]; then
    exit 1
fi
echo "rcb-doctor: every check passed; its report on the software GPU with the leak:"
sed 's/^/    /' "$tmp/leak.out"
