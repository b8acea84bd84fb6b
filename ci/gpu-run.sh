#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root, what ci/gpu.sh staged in .gpu/ (copy the
# repository with .gpu/ to a machine with a GPU and run `bash .gpu/gpu-run.sh`). Checks, each of
# which ends passed, failed or skipped:
#   cuda-runtime   libcuda.so.1 loads and sees a GPU;
#   ptx            .gpu/kernels.cu compiled to PTX with nvcc (when nvcc is present; whether the
#                  committed PTX matches is reported, not checked);
#   tests/<name>   every staged test binary with RCB_BACKEND=cuda and RCB_TEST_REQUIRE_GPU=1 (a
#                  missing GPU fails the test instead of skipping it): exit 0 and an `ok` result;
#   rcb-demo, xla_flow-<name> (the patched XLA's call sequences): exit 0, all checks passed
#                  (the series' xla_cc_tests, xla_flow-xla_test-<name>: GoogleTest's passed line);
#   rcb-doctor     exit 0 ("usable") through the cuda backend, with the update budget off and
#                  nothing measured (the probe runs on HIP only);
#   torch_flatten  tests/gpu/torch_flatten.py (PyTorch-captured graphs flattened and relocated);
#   torch_collectives  tests/gpu/torch_collectives.py (NCCL collectives on two GPUs; a machine
#                  with one fails it unless RCB_GPU_ALLOW_MISSING names gpus);
#   torch_collective_cache  tests/gpu/torch_collective_cache.py (the same collectives through the
#                  trace cache and the VMM pool on two GPUs; likewise);
#   real_graphs    tests/gpu/real_graphs.py (the benchmark on them; tables in real_graphs.md);
#   rcb-bench      the benchmark (tables in rcb-bench.md; cuBLAS on the library path when the
#                  machine has it); its `budget` scenario measures device memory over 100 000
#                  in-place updates;
#   before         rcb-bench and real_graphs.py with the library of REV (ci/gpu.sh --before REV).
# Anything missing (the CUDA runtime, a GPU, python3, torch able to use CUDA, torchvision, a staged
# program) FAILS its check, named for what is missing (tests/gpu/gpu_deps.py: torch not importable
# or built without CUDA is `torch`, a CUDA build of torch that sees no device is `cuda`).
# RCB_GPU_ALLOW_MISSING=torch[,torchvision][,cuda][,gpus][,nvcc] turns the named missing dependency
# into a skip instead (for a partial run; a skip is listed by name in the verdict).
# SKIPPED lines of the test programs (checks of the software GPU's knobs, a second device) are
# listed by name and must be exactly those of tests/expected-skips/gpu.txt, each as many times as
# it is listed (the `skips` check);
# a test skipped for lack of a GPU is a failure.
# The last line is the verdict: how many checks ran, passed, failed and were skipped, by name.
# Exits 1 when any check failed.
# Writes to $OUT (else .gpu/out), at most 8 files: summary.log, rcb-bench.md, real_graphs.md,
# before.md (when ci/gpu.sh staged a --before build), and logs.tar.gz with every per-check log and
# the compiled PTX.
set -uo pipefail # no -e: every check's status is recorded and reaches the verdict

stage=.gpu
out=${OUT:-$stage/out}
logs=$(mktemp -d)/logs
mkdir -p "$out" "$logs"
exec > >(tee "$out/summary.log") 2>&1
tee_pid=$!
# At exit: the logs packed, then tee given the end of its input and waited for, so that the
# verdict line reaches summary.log.
trap 'tar -czf "$out/logs.tar.gz" -C "$(dirname "$logs")" logs; exec >&- 2>&-; wait "$tee_pid"' EXIT

passed=() failed=() skipped=() inner_skips=()
pass() { passed+=("$1"); echo "PASS $1${2:+: $2}"; }
fail() { failed+=("$1"); echo "FAIL $1: $2"; }
# A missing dependency: a skip only when RCB_GPU_ALLOW_MISSING names it, else a failure.
allowed() { [[ ",${RCB_GPU_ALLOW_MISSING:-}," == *",$1,"* ]]; }
missing() { # check dependency why
    if allowed "$2"; then
        skipped+=("$1 ($3; RCB_GPU_ALLOW_MISSING=$2)")
        echo "SKIP $1: $3 (allowed by RCB_GPU_ALLOW_MISSING)"
    else
        fail "$1" "$3 (set RCB_GPU_ALLOW_MISSING=$2 to skip it)"
    fi
}
# The SKIPPED lines of a log (`SKIPPED <name>: <what> (<why>)`), every one, listed in the verdict
# and counted by the `skips` check.
inner() { # log
    local line
    while IFS= read -r line; do inner_skips+=("${line#SKIPPED }"); done < <(grep -o 'SKIPPED .*' "$1")
    grep -o 'SKIPPED .*' "$1" >>"$logs/skipped.log" || true
}
# Whether a log says a test or program skipped for lack of a GPU or of the CUDA runtime (shown).
gpu_skipped() { # log
    grep -E 'SKIPPED.*\((no GPU|no libcuda|cuInit failed)' "$1" | head -n 3 | sed 's/^/    /' | grep .
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
RCB_COMMIT=$(cat "$stage/commit" 2>/dev/null || echo unknown)
export RCB_COMMIT
echo "commit: $RCB_COMMIT"
# How many GPUs (torch_collectives needs two; with one, the checks needing a second are skipped).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if ! command -v python3 >/dev/null; then
    probe="no python3 to probe libcuda.so.1 with"
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && probe="ok"
else
    probe=$(python3 -c '
import ctypes
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    raise SystemExit(f"libcuda.so.1 cannot be loaded: {e}")
n = ctypes.c_int(0)
rc = cuda.cuInit(0)
if rc != 0 or cuda.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
    raise SystemExit(f"libcuda.so.1 sees no GPU (cuInit returned {rc}, {n.value} devices)")
print("ok", n.value)' 2>&1)
fi
case $probe in
    ok*) pass cuda-runtime "libcuda.so.1 sees ${probe#ok } device(s)" ;;
    *) missing cuda-runtime cuda "$probe" ;;
esac

ptx=$stage/kernels.ptx
if command -v nvcc >/dev/null; then
    nvcc --version | tail -1
    if nvcc -ptx -arch=sm_90 -o "$logs/kernels.ptx" "$stage/kernels.cu" >"$logs/nvcc.log" 2>&1; then
        pass ptx "nvcc compiled kernels.cu"
        if [ ! -f "$ptx" ]; then
            ptx=$logs/kernels.ptx
            echo "ptx: no committed PTX staged; using the one just compiled"
        elif cmp -s "$ptx" "$logs/kernels.ptx"; then
            echo "ptx: the committed tests/gpu/kernels.ptx matches nvcc's output"
        else
            echo "ptx: the committed tests/gpu/kernels.ptx DIFFERS from nvcc's output (see logs/kernels.ptx)"
        fi
    else
        fail ptx "nvcc could not compile kernels.cu: $(tail -n 3 "$logs/nvcc.log")"
    fi
else
    missing ptx nvcc "no nvcc on this machine to compile kernels.cu; the committed PTX is used"
fi
[ -f "$ptx" ] || fail ptx "no PTX for the test kernels (the GPU tests will fail)"

export RCB_BACKEND=cuda RCB_TEST_PTX="$(realpath "$ptx" 2>/dev/null || echo "$ptx")" RUST_BACKTRACE=1
allowed cuda || export RCB_TEST_REQUIRE_GPU=1
tests_passed=0 tests_failed=0
bins=("$stage"/tests/*)
[ -e "${bins[0]}" ] || fail tests "no test binaries staged in $stage/tests (run ci/gpu.sh first)"
for bin in "${bins[@]}"; do
    [ -e "$bin" ] || continue
    name=tests/$(basename "$bin")
    log=$logs/$(basename "$bin").log
    timeout 300 "$bin" --show-output >"$log" 2>&1
    rc=$?
    result=$(grep -h '^test result:' "$log" | tail -1)
    read -r p f < <(awk '/^test result:/ {p = $4; f = $6} END {print p + 0, f + 0}' "$log")
    tests_passed=$((tests_passed + p)) tests_failed=$((tests_failed + f))
    echo "$name: rc=$rc ${result:-no result line} (SKIPPED lines: $(grep -c 'SKIPPED' "$log"))"
    if [ $rc -ne 0 ] || [[ $result != "test result: ok."* ]]; then
        # Panics inside passing tests (tests of the panic boundary) are expected; shown on failure only.
        grep -h -E '^test .* FAILED$|panicked at' "$log" | sed 's/^/    /'
        fail "$name" "exit $rc, ${result:-no result line}"
    elif gpu_skipped "$log"; then
        missing "$name" cuda "tests skipped for lack of a GPU"
    else
        pass "$name"
    fi
    inner "$log"
done

# A program that must run, prints `all checks passed` (with `checks`; GoogleTest's `[  PASSED  ]`
# line with no failed test, with `gtest`) and skips nothing for lack of a GPU.
program() { # name path [checks|gtest]
    local name=$1 exe=$2 rc log=$logs/$1.log
    if [ ! -x "$exe" ]; then
        fail "$name" "not staged ($exe)"
        return
    fi
    timeout 300 "$exe" >"$log" 2>&1
    rc=$?
    sed 's/^/    /' "$log" | tail -n 12
    inner "$log"
    if [ $rc -ne 0 ]; then
        fail "$name" "exit $rc"
    elif gpu_skipped "$log"; then
        missing "$name" cuda "skipped for lack of a GPU"
    elif [ "${3:-}" = checks ] && ! grep -q 'all checks passed' "$log"; then
        fail "$name" "exit 0 without 'all checks passed'"
    elif [ "${3:-}" = gtest ] && { ! grep -q '^\[  PASSED  \] [1-9]' "$log" || grep -q '^\[  FAILED  \]' "$log"; }; then
        fail "$name" "exit 0 without GoogleTest's passed line, or with a failed test"
    else
        pass "$name"
    fi
}
program rcb-demo "$stage/rcb-demo"
# rcb-doctor: usable through the cuda backend, and the update budget off without a measurement
# (CUDA's updates are not known to take device memory, so the library does not probe there).
doctor_log=$logs/rcb-doctor.log doctor_rc=0
if [ ! -x "$stage/rcb-doctor" ]; then
    fail rcb-doctor "not staged ($stage/rcb-doctor)"
else
    timeout 300 "$stage/rcb-doctor" >"$doctor_log" 2>&1 || doctor_rc=$?
    grep -E '^  (backend|version|[0-9]+|budget|measured|advice):|^rcb-doctor:' "$doctor_log" | sed 's/^/    /'
    if [ $doctor_rc -ne 0 ]; then
        fail rcb-doctor "exit $doctor_rc ($(tail -n 1 "$doctor_log"))"
    elif ! grep -q '^  backend: cuda$' "$doctor_log"; then
        fail rcb-doctor "the cuda backend is not the one loaded"
    elif ! grep -q '^  budget: off, the fixed default of this runtime (nothing measured)$' "$doctor_log"; then
        fail rcb-doctor "the update budget is not off without a measurement: $(grep '^  budget:' "$doctor_log")"
    else
        pass rcb-doctor "usable, update budget off, nothing measured"
    fi
fi
flows=("$stage"/xla_flow-*)
[ -e "${flows[0]}" ] || fail xla_flow "no xla_flow programs staged"
for flow in "${flows[@]}"; do
    # The series' xla_cc_tests are GoogleTest programs; the other replays print their own verdict.
    case $flow in
        */xla_flow-xla_test-*) kind=gtest ;;
        *) kind=checks ;;
    esac
    [ -e "$flow" ] && program "$(basename "$flow")" "$flow" $kind
done

# python3 with a torch that can use CUDA (and torchvision, for ResNet-18): required unless allowed
# missing. gpu_deps.py names what is missing: torch (not importable, or built without CUDA) or cuda
# (a CUDA build of torch that sees no device).
torch_dep=torch torch_why=
if ! command -v python3 >/dev/null; then
    torch_why="no python3"
else
    torch_probe=$(python3 "$stage/gpu_deps.py" 2>&1 | tail -n 1)
    case $torch_probe in
        ok) ;;
        torch:* | cuda:*) torch_dep=${torch_probe%%:*} torch_why=${torch_probe#*: } ;;
        *) torch_why="the torch probe (gpu_deps.py) failed: $torch_probe" ;;
    esac
fi
export RCB_GPU_ALLOW_MISSING=${RCB_GPU_ALLOW_MISSING:-}
python_check() { # name script [output]
    local name=$1 script=$2 output=${3:-$logs/$1.log} rc
    if [ -n "$torch_why" ]; then
        missing "$name" "$torch_dep" "$torch_why"
        return
    fi
    [ -f "$script" ] || { fail "$name" "not staged ($script)"; return; }
    RCB_LIBRARY="$(realpath "$stage/librocm_cmdbuf.so")" RCB_TIMER="$(realpath "$stage/libreal_graphs_timer.so")" \
        timeout 300 python3 "$script" >"$output" 2>"$logs/$name.err"
    rc=$?
    # Every failure and figure, then the first of the rest.
    grep -h -E '^(FAIL|figure)' "$output" "$logs/$name.err" | sed 's/^/    /'
    grep -h -E '^(PASS|SKIPPED)' "$output" "$logs/$name.err" | sed 's/^/    /' | head -n 30
    inner "$output"
    inner "$logs/$name.err"
    if [ $rc -ne 0 ]; then
        tail -n 5 "$logs/$name.err" | sed 's/^/    /'
        fail "$name" "exit $rc"
    elif gpu_skipped "$output" || gpu_skipped "$logs/$name.err"; then
        missing "$name" cuda "skipped for lack of a GPU"
    else
        pass "$name"
    fi
}
python_check torch_flatten "$stage/torch_flatten.py"
# NCCL collectives captured by PyTorch on two GPUs, one process each: a machine with one lacks a
# GPU for it (a failure unless RCB_GPU_ALLOW_MISSING names gpus).
if [ "$gpus" -ge 2 ]; then
    NCCL_NVLS_ENABLE=0 python_check torch_collectives "$stage/torch_collectives.py"
    NCCL_NVLS_ENABLE=0 python_check torch_collective_cache "$stage/torch_collective_cache.py" "$out/torch_collective_cache.log"
else
    missing torch_collectives gpus "two GPUs needed, this machine has $gpus"
    missing torch_collective_cache gpus "two GPUs needed, this machine has $gpus"
fi
python_check real_graphs "$stage/real_graphs.py" "$out/real_graphs.md"
[ ! -f "$out/real_graphs.md" ] || cat "$out/real_graphs.md"

if [ -x "$stage/rcb-bench" ]; then
    # cuBLAS for the flatten scenario's GEMM rows: the CUDA toolkit's, else PyTorch's wheel.
    cublas=$( { ls /usr/local/cuda/lib64/libcublas.so*
        python3 -c 'import glob, site; [print(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/**/libcublas.so*", recursive=True)]'
    } 2>/dev/null | head -1)
    [ -z "$cublas" ] || export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    timeout 300 "$stage/rcb-bench" >"$out/rcb-bench.md" 2>&1
    rc=$?
    cat "$out/rcb-bench.md"
    if [ $rc -eq 0 ]; then pass rcb-bench "output in rcb-bench.md"; else fail rcb-bench "exit $rc (output in rcb-bench.md)"; fi
else
    fail rcb-bench "not staged ($stage/rcb-bench)"
fi

# Before and after in the same run (ci/gpu.sh --before REV): the update and stream scenarios and
# the real graphs again with the library of REV.
if [ -d "$stage/before" ]; then
    before_rc=0
    {
        echo "# before: commit $(cat "$stage/before/commit")"
        timeout 200 "$stage/before/rcb-bench" update streams 2>&1 || before_rc=$?
        if [ -z "$torch_why" ]; then
            RCB_LIBRARY="$(realpath "$stage/before/librocm_cmdbuf.so")" RCB_TIMER="$(realpath "$stage/libreal_graphs_timer.so")" \
                timeout 240 python3 "$stage/real_graphs.py" 2>&1 || before_rc=$?
        fi
    } >"$out/before.md"
    if [ $before_rc -eq 0 ]; then pass before "output in before.md"; else fail before "exit $before_rc (output in before.md)"; fi
fi

# The checks skipped inside the programs are exactly those a GPU machine is expected to skip
# (the software GPU's knobs, a second device), each as many times as listed: a skip more or less,
# or a test skipping one check more or less than listed, fails the run.
# A machine with one GPU also skips the checks that need a second one
# (tests/expected-skips/gpu-one-device.txt); one with two skips the software-GPU checks of those
# tests instead (gpu-two-devices.txt).
if [ -f "$stage/expected-skips-gpu.txt" ] && [ -f "$stage/expected-skips-gpu-one-device.txt" ] &&
    [ -f "$stage/expected-skips-gpu-two-devices.txt" ] && [ -f "$stage/skips.sh" ]; then
    touch "$logs/skipped.log"
    expected=$logs/expected-skips.txt
    cat "$stage/expected-skips-gpu.txt" >"$expected"
    if [ "$gpus" -ge 2 ]; then
        cat "$stage/expected-skips-gpu-two-devices.txt" >>"$expected"
    else
        cat "$stage/expected-skips-gpu-one-device.txt" >>"$expected"
    fi
    if bash "$stage/skips.sh" "$expected" "$logs/skipped.log"; then
        pass skips "as tests/expected-skips/gpu.txt lists"
    else
        fail skips "the checks skipped inside the programs differ from tests/expected-skips/gpu.txt (above)"
    fi
else
    fail skips "ci/skips.sh or the tests/expected-skips/gpu*.txt lists not staged"
fi

echo
echo "Rust tests: $tests_passed passed, $tests_failed failed"
if [ ${#inner_skips[@]} -gt 0 ]; then
    echo "skipped inside checks that ran (${#inner_skips[@]}):"
    printf '  %s\n' "${inner_skips[@]}"
fi
[ ${#failed[@]} -eq 0 ] || echo "failed: ${failed[*]}"
ran=$((${#passed[@]} + ${#failed[@]}))
list() { local first=$1; shift; printf '%s' "$first"; [ $# -eq 0 ] || printf ' | %s' "$@"; }
verdict=PASS
[ ${#failed[@]} -eq 0 ] && [ $ran -gt 0 ] || verdict=FAIL
echo "gpu-run: $verdict: $ran checks ran, ${#passed[@]} passed, ${#failed[@]} failed$([ ${#failed[@]} -eq 0 ] || echo " ($(list "${failed[@]}"))"), ${#skipped[@]} skipped$([ ${#skipped[@]} -eq 0 ] || echo " ($(list "${skipped[@]}"))"); ${#inner_skips[@]} checks skipped inside them$([ ${#inner_skips[@]} -eq 0 ] || echo " ($(list "${inner_skips[@]%%: *}"))")"
[ $verdict = PASS ]
