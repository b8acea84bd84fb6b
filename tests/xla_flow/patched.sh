#!/usr/bin/env bash
# Writes into DIR the new files of the patch series that the xla_flow programs compile, as the
# patches create them: from 0003 the library loader, the fallback accounting and the command
# buffer options (xla/stream_executor/rocm/rocm_cmdbuf_{library,fallback,options}.{h,cc}) with
# XLA's side of the options (xla/service/gpu/rocm_cmdbuf_flags.{h,cc}) and the bridge
# (rocm_cmdbuf_bridge.{h,cc}, as 0004 leaves it) and the command buffer
# (rocm_cmdbuf_command_buffer.{h,cc}, as 0005 leaves it), from 0004 the move log
# (xla/stream_executor/rocm/rocm_cmdbuf_move_log.{h,cc}), from 0005 the stream hooks
# (rocm_cmdbuf_streams.{h,cc}), from 0006 the profiler hook
# (xla/backends/profiler/gpu/rocm_cmdbuf_correlation.{h,cc}), from 0007 the VMM pool
# (xla/service/gpu/rocm_cmdbuf_vmm_pool.{h,cc}, as 0008 leaves it), and the series' xla_cc_tests
# (every *_test.cc a patch adds) with the files they test and the mock they use (0003:
# rocm_cmdbuf_bridge, rocm_cmdbuf_command_buffer, rocm_cmdbuf_fallback, rocm_cmdbuf_flags,
# rocm_cmdbuf_library; 0004:
# command_buffer_allocation_moves, rocm_cmdbuf_move_log, rocm_cmdbuf_interface.h,
# mock_rocm_cmdbuf_command_buffer.h, each as the last patch that touches it leaves it; 0005:
# command_buffer_trace_cache, rocm_cmdbuf_streams; 0006: rocm_cmdbuf_correlation; 0007:
# rocm_cmdbuf_vmm_pool).
#   tests/xla_flow/patched.sh DIR
set -euo pipefail
dir=$1
patches=$(cd "$(dirname "$0")/../../xla-patches" && pwd)
mkdir -p "$dir"
cd "$dir"
git apply --include='xla/stream_executor/rocm/rocm_cmdbuf_library*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_fallback*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_options.*' \
    --include='xla/service/gpu/rocm_cmdbuf_flags*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_bridge*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_command_buffer*' \
    "$patches/0003-rocm_cmdbuf-command-buffer.patch"
# 0004 adds NameAllocations to the bridge and cases to its test, and allocation moves to the
# command buffer.
git apply --include='xla/stream_executor/rocm/rocm_cmdbuf_move_log*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_bridge*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_command_buffer*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_interface.h' \
    --include='xla/stream_executor/rocm/mock_rocm_cmdbuf_command_buffer.h' \
    --include='xla/backends/gpu/runtime/command_buffer_allocation_moves*' \
    "$patches/0004-rocm_cmdbuf-update-in-place.patch"
# 0005 extends the interface and its mock and the bridge (LaunchEnqueuedNothing, with a case of its
# test), adds the trace cache's hooks and the stream hooks, each with its test, and gives the
# command buffer the trace cache and recording again.
git apply --include='xla/stream_executor/rocm/rocm_cmdbuf_interface.h' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_command_buffer*' \
    --include='xla/stream_executor/rocm/mock_rocm_cmdbuf_command_buffer.h' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_bridge*' \
    --include='xla/backends/gpu/runtime/command_buffer_trace_cache*' \
    --include='xla/stream_executor/rocm/rocm_cmdbuf_streams*' \
    "$patches/0005-rocm_cmdbuf-traced-commands-and-streams.patch"
git apply --include='xla/backends/profiler/gpu/rocm_cmdbuf_correlation*' \
    "$patches/0006-rocm_cmdbuf-profiler.patch"
# 0007 adds the VMM pool with its test; 0008 (main only) its DeferDefinitions.
git apply --include='xla/service/gpu/rocm_cmdbuf_vmm_pool*' "$patches/0007-rocm_cmdbuf-vmm-pool.patch"
git apply --include='xla/service/gpu/rocm_cmdbuf_vmm_pool*' \
    "$patches/0008-rocm_cmdbuf-vmm-pool-definitions.patch"
