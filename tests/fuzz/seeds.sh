#!/usr/bin/env bash
# Writes the hand-made seeds of tests/fuzz/corpus: one valid flow per object family, each op as
# fuzz_abi.c reads it (op number, argument byte count, argument bytes; a missing byte reads as 0,
# the ordinary choice). Run it after changing how fuzz_abi.c reads its arguments, then check each
# seed with FUZZ_TRACE=1 (see ci/fuzz.sh). The rest of the corpus is what fuzzing kept.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)/corpus
mkdir -p "$dir"

# The op numbers: the order of OPS in fuzz_abi.c.
ops=(cmdbuf_new cmdbuf_free set_allocations add_kernel add_kernel_params add_memcpy add_memset add_empty
    add_child add_child_graph add_flattened_child update_kernel update_kernel_params update_memcpy
    update_memset update_child capture capture_end finalize begin_update launch queries
    update_allocations move_allocations trace_cache_new trace_cache_free get_or_trace stream_acquire
    stream_release stream_cache pool_new pool_acquire pool_release pool_copy pool_timeline pool_free
    correlator_new correlator_free correlator_add correlator_exchange correlator_misc misc harness
    update_child_graph update_flattened_child budget counters stream_release_idle relocation_oracle
    double_free thread_exit)

seed="" # the seed being written, as printf escapes
op() { # name [argument bytes, hex]...
    local name=$1 i
    shift
    for i in "${!ops[@]}"; do
        if [ "${ops[$i]}" = "$name" ]; then
            seed+=$(printf '\\x%02x\\x%02x' "$i" "$#")
            for b in "$@"; do seed+="\\x$b"; done
            return
        fi
    done
    echo "unknown op $name" >&2
    exit 1
}
write() { # file name
    printf "$seed" >"$dir/$1"
    seed=""
}

# Command buffer slot 0 (args "00 00"), slot 1 ("00 01").
# A table of two allocations: harness buffers 0 and 1 (4096 bytes each).
table01=(00 00 00 00 00 01 00 00 00)
# ... and after a move of allocation 0 to buffer 2.
table21=(00 02 00 00 00 01 00 00 00)
# fill(buffer 0, 7, 64 elements): function fill, 1x1x1 x 64, three arguments (device pointer,
# 4-byte value, 8-byte count).
fill0=(00 00 00 00 00 00 00 00 03 00 01 00 00 00 00 00 01 00 00 07 00 00 00 00 00 00 01 00 00)

# 1. Record, finalize, launch, move, update: the life of a primary command buffer.
op cmdbuf_new
op set_allocations 00 00 "${table01[@]}"
op add_kernel 00 00 00 "${fill0[@]}"
op add_memcpy 00 00 01 00 00 00 00 01 00 00 00
op add_memset 00 00 02 00 00 00 05 00 00 00 00
op add_empty 00 00 02 00 01
op finalize 00 00
op launch 00 00 00
op update_allocations 00 00 "${table21[@]}"
op launch 00 00 00
op move_allocations 00 00 01 00 00 00 00
op begin_update 00 00
op update_kernel 00 00 00 03 "${fill0[@]}"
op update_memset 00 00 00 01 00 00 00 09
op finalize 00 00
op queries 00 00 00
op queries 00 00 01
op queries 00 00 02
op queries 00 00 03
op launch 00 00 00
op cmdbuf_free 00 00
write cmdbuf-flow

# 2. A nested command buffer cloned as a child and flattened into a primary, then moved.
op cmdbuf_new 01 02
op set_allocations 00 01 "${table01[@]}"
op add_kernel 00 01 00 "${fill0[@]}"
op finalize 00 01
op cmdbuf_new 00
op set_allocations 00 00 "${table01[@]}"
op add_child 00 00 00 00 01
op add_flattened_child 00 00 00 01 00 01
op finalize 00 00
op launch 00 00 00
op move_allocations 00 00 01 00 00 02
op update_child 00 00 01 00 00 01
op cmdbuf_free 00 01
op cmdbuf_free 00 00
write child-and-flatten

# 3. Capture into a command buffer; a raw captured graph flattened into another one.
op cmdbuf_new
op capture 00 00 00 02 00 00 00 00 00 00 07 00 01 00 00 00 00 00 08
op finalize 00 00
op launch 00 00 00
op harness 00 00 00 00 03 05 00 01 00
op cmdbuf_new 01
op set_allocations 00 01 "${table01[@]}"
op add_flattened_child 00 01 00 00 00 00
op add_child_graph 00 01 00 00 00
op finalize 00 01
op launch 00 01 00
op move_allocations 00 01 01 00 00 02
op launch 00 01 00
op begin_update 00 01
op update_flattened_child 00 01 00 01 00 00 00 00
op update_child_graph 00 01 00 00 00 00
op finalize 00 01
op launch 00 01 00
write capture-and-raw-graph

# 4. A trace cache: traced, hit, relocated; its graph cloned into a command buffer.
op trace_cache_new
op get_or_trace 00 00 00 00 00 00 00 00 00 01 00 00 00
op get_or_trace 00 00 00 00 00 00 00 00 00 01 00 00 00
op get_or_trace 00 00 00 00 00 02 00 00 00 01 00 00 00
op cmdbuf_new
op add_child_graph 00 00 00 04 00
op finalize 00 00
op launch 00 00 00
op trace_cache_free 00 00
write trace-cache

# 5. Streams of the cache: acquire, release, acquire again (a hit), statistics, trim; a release
# after a synchronize without the query, and one of a stream never used.
op stream_acquire 00
op stream_acquire 01
op stream_release 00 00
op stream_acquire 02
op stream_cache 00 00
op stream_cache 00 01
op stream_release 00 01
op stream_release_idle 00 02
op stream_acquire 01
op stream_release_idle 00 01 01
write streams

# 6. A VMM pool of each backing: acquire, copy in and out, release, acquire again, timeline, free.
op pool_new 00 00 00 00 00 00 00 00 00
op pool_acquire 00 00
op pool_copy 00 00 01 00 00 00 00 00 00 00 00 00 00
op pool_release 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
op pool_acquire 00 00
op pool_timeline 00 00
op pool_new 01 00 01 01
op pool_acquire 00 01
op pool_copy 00 01 01 00 00 00 00 00 01 00 00 00 00
op pool_release 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
op pool_free 00 01
write vmm-pools

# 7. A correlator: API events and activities (some shared ids), an exchange, the rest.
op correlator_new
op correlator_add 00 00 02 04
op correlator_add 00 00 03 06
op correlator_add 00 00 00 00 01 00 05 00
op correlator_exchange 00 00
op correlator_misc 00 00 00
op correlator_misc 00 00 01
op correlator_misc 00 00 02
op correlator_free 00 00
op misc
write correlator

# 8. A budget of one byte: every address update re-instantiates; counters read and reset.
op cmdbuf_new
op budget 00 00 01 00
op set_allocations 00 00 "${table01[@]}"
op add_kernel 00 00 00 "${fill0[@]}"
op finalize 00 00
op launch 00 00 00
op update_allocations 00 00 "${table21[@]}"
op launch 00 00 00
op update_allocations 00 00 "${table01[@]}"
op launch 00 00 00
op budget 00 00 00
op counters 01 00 00 00
op counters 00 00
op counters 01 00 00 01
op counters 00 02 03
write budget-and-counters

# 9. A kernel whose argument sizes are unknown (kernelParams), updated in place.
op cmdbuf_new
op add_kernel_params 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02 01 00 02
op finalize 00 00
op launch 00 00 00
op begin_update 00 00
op update_kernel_params 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
op finalize 00 00
op update_allocations 00 00 "${table01[@]}"
write kernel-params

# 10. The relocation oracle on the aliasing of one array passed twice: table [(a, n), (a, n),
# (out, n)], out = a + a, then only allocation 1 moves (f(a, a), then f(a, b)).
op relocation_oracle 02 00 00 03 00 00 00 01 00 01 00 02 00 01 00 00 01 01 00 01 04 00 01 00 00 00 00 00
write relocation-aliased

# 11. Double frees of every kind, each object used first (fuzz_abi.c op_double_free): streams
# released twice by the plain then the plain release, then (second op) by the idle ones; a
# command buffer re-instantiated by a one-byte budget while its launch may run, with and
# without a flattened trace-cache entry; VMM pools of both backings.
op double_free
op double_free 01 01 01 01 01 03 01
write double-free

# 13. The same double frees with the first stream's two releases made from two threads at once
# (bit 1 of release_twice's first byte): by the plain releases, then (second op) by the idle ones.
op double_free 00 02
op double_free 01 03 01
write racing-release

# 14. Calls from a pthread key destructor at a thread's exit: the thread_exit op's bytes are four
# ops (command buffer slot 0 made, finalized, launched, freed); the atexit handler then runs the
# first four ops of this input again (the same thread_exit is skipped there).
op cmdbuf_new
op thread_exit 00 02 00 00 12 02 00 00 14 03 00 00 00 01 02 00 00
op stream_acquire
op stream_release
write exit-calls

# 12. Event record and wait, host and memory-operation nodes: a raw graph of them (harness case
# 5) flattened into a primary, launched, moved, launched and re-traced in place; a capture that
# joins the second stream through events and calls a host function (case 6), flattened into
# another primary and launched.
op harness 00 05
op cmdbuf_new
op set_allocations 00 00 "${table01[@]}"
op add_flattened_child 00 00 00 00 00 00
op finalize 00 00
op launch 00 00 00
op move_allocations 00 00 01 00 00 02
op launch 00 00 00
op begin_update 00 00
op update_flattened_child 00 00 00 00 00 00 00 00
op finalize 00 00
op launch 00 00 00
op harness 01 06
op cmdbuf_new 01
op add_flattened_child 00 01 00 00 00 01
op finalize 00 01
op launch 00 01 00
write node-kinds
