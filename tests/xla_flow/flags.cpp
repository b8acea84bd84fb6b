// What the flags cost and load, with xla-patches/0003's own files (extracted by patched.sh and
// compiled here against the stand-ins of stubs/):
//
//   * rocm_cmdbuf_library.cc: XLA links no rocm_cmdbuf library. This program does not either
//     (the library is not loaded when main starts), and it calls the C ABI through
//     rocm_cmdbuf.hpp as the series does: the calls reach the loader's forwarders, which fail
//     with RCB_STATUS_RUNTIME_UNAVAILABLE until the first flag asks for the library
//     (LoadRocmCmdbuf); then librocm_cmdbuf.so.0 is opened once, from the loader's path, and a
//     command buffer recorded, launched and checked through it. Run by run.sh also where the file
//     is not on the loader's path (`missing`), where the file found lacks the library's
//     functions (`partial`, also run with a library of the next minor version, which the loader
//     takes: a minor release only adds) and where its rcb_version has another interface than the
//     header's (`version`: the next major): one error naming the flag that asked and why, one "load" fallback counted
//     (0003's rocm_cmdbuf_fallback.cc), the file closed again, the same answer for every later
//     flag, and every call still refused.
//   * rocm_cmdbuf_options.cc (StreamExecutor's side, which reads no XLA flag) and
//     rocm_cmdbuf_flags.cc (XLA's side, which passes them in): a command buffer follows the flags
//     of the module being run on its thread (RocmCmdbufModuleOptions, installed by
//     GpuExecutable::ExecuteThunks with ScopedRocmCmdbufOptions), else the process's (XLA_FLAGS,
//     read once through the source rocm_cmdbuf_flags.cc registers at static initialization);
//     scopes nest and are per thread. A module that sets the process-wide stream-cache or
//     profiler flag otherwise than XLA_FLAGS gets one warning per flag (RocmCmdbufModuleOptions,
//     called by GpuExecutable's constructor).
//   * rocm_cmdbuf_options.cc's RocmCmdbufNestedGraph, which XLA's RocmCommandBuffer asks before
//     it down-casts a nested command buffer: false for every command buffer until the library's
//     first command buffer registers its answer (the path every process without the library
//     takes), then the registered answer, the graph of a library nested command buffer and false
//     for any other.
//
// Exits 0 when every check holds.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/log/log.h"
#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"
#include "xla/stream_executor/command_buffer.h"

#define ROCM_CMDBUF_AVAILABLE 1
#include "xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"
#include "xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
#include "xla/stream_executor/rocm/rocm_cmdbuf_options.cc"
#include "xla/service/gpu/rocm_cmdbuf_flags.cc"

namespace {

using stream_executor::gpu::CurrentRocmCmdbufOptions;
using stream_executor::gpu::RocmCmdbufFallback;
using stream_executor::gpu::RocmCmdbufFallbackCount;
using stream_executor::gpu::kRocmCmdbufLibrary;
using stream_executor::gpu::LoadRocmCmdbuf;
using stream_executor::gpu::RocmCmdbufNestedGraph;
using stream_executor::gpu::RocmCmdbufOptions;
using stream_executor::gpu::ScopedRocmCmdbufOptions;
using stream_executor::gpu::SetRocmCmdbufNestedGraph;
using xla::gpu::RocmCmdbufModuleOptions;
using xla::gpu::RocmCmdbufOptionsFrom;

// GpuExecutable's constructor: the module's options, with the warnings.
void WarnRocmCmdbufProcessFlags(const char* module, const xla::DebugOptions& options) {
  std::shared_ptr<const RocmCmdbufOptions> made = RocmCmdbufModuleOptions(module, options);
  CHECK(made != nullptr && made->command_buffers == options.rocm_cmdbuf &&
            made->update_in_place == options.rocm_cmdbuf_update_in_place &&
            made->trace_cache == options.rocm_cmdbuf_trace_cache &&
            made->flatten_traced == options.rocm_cmdbuf_flatten_traced,
        "module %s: its options are not its flags'", module);
}

bool LibraryLoaded() {
  void* handle = dlopen(kRocmCmdbufLibrary, RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

int ErrorLines() {
  int n = 0;
  for (const std::string& line : xla_flow_log::lines) n += line.rfind("ERROR: ", 0) == 0 ? 1 : 0;
  return n;
}

bool Same(const RocmCmdbufOptions& a, const RocmCmdbufOptions& b) {
  return a.command_buffers == b.command_buffers && a.update_in_place == b.update_in_place &&
         a.trace_cache == b.trace_cache && a.flatten_traced == b.flatten_traced;
}

// Every call through the wrapper is refused while nothing is loaded.
void CallsRefused(const char* when) {
  rcb::CmdBuf cb;
  rcb::Status created = rcb::CmdBuf::Create(0, &cb);
  CHECK(created.code() == RCB_STATUS_RUNTIME_UNAVAILABLE && cb.get() == nullptr, "%s: create: %s", when,
        created.ToString().c_str());
  rcb_runtime_info info{};
  CHECK(rcb::LoadRuntime(&info).code() == RCB_STATUS_RUNTIME_UNAVAILABLE, "%s: runtime load", when);
}

// A flag asked, the file cannot be used (`why` in the one error): every flag gets the same answer.
void Unusable(const char* why) {
  CallsRefused("before any flag asked");
  CHECK(!LoadRocmCmdbuf("--xla_gpu_rocm_cmdbuf"), "the library loaded");
  CHECK(!LibraryLoaded(), "the unusable %s is still open", kRocmCmdbufLibrary);
  CHECK(ErrorLines() == 1, "%d errors logged", ErrorLines());
  std::string error;
  for (const std::string& line : xla_flow_log::lines) {
    if (line.rfind("ERROR: ", 0) == 0) error = line;
  }
  CHECK(error.find("--xla_gpu_rocm_cmdbuf is set") != std::string::npos && error.find(why) != std::string::npos &&
            error.find("as if it were off") != std::string::npos,
        "the error names the flag, %s and what happens: %s", why, error.c_str());
  CHECK(RocmCmdbufFallbackCount(RocmCmdbufFallback::kLoad) == 1, "%lld load fallbacks counted",
        static_cast<long long>(RocmCmdbufFallbackCount(RocmCmdbufFallback::kLoad)));
  CHECK(!LoadRocmCmdbuf("--xla_gpu_rocm_cmdbuf_profiler"), "another flag loaded it");
  CHECK(ErrorLines() == 1 && RocmCmdbufFallbackCount(RocmCmdbufFallback::kLoad) == 1,
        "another flag logged or counted again (%d errors)", ErrorLines());
  CallsRefused("after the load failed");
  std::printf("%s\n", error.c_str());
}

void Options() {
  xla::DebugOptions process;
  process.rocm_cmdbuf = true;
  process.rocm_cmdbuf_trace_cache = true;
  xla::process_flags_for_test = process;
  const RocmCmdbufOptions from_flags = RocmCmdbufOptionsFrom(process);
  CHECK(from_flags.command_buffers && from_flags.trace_cache && !from_flags.update_in_place &&
            !from_flags.flatten_traced,
        "the options are the flags' fields");
  const int reads = xla::flag_reads_for_test;
  CHECK(Same(CurrentRocmCmdbufOptions(), from_flags), "without a module: the process's flags");
  // XLA_FLAGS are read once.
  xla::process_flags_for_test = xla::DebugOptions();
  CHECK(Same(CurrentRocmCmdbufOptions(), from_flags), "the process's flags read again");
  CHECK(xla::flag_reads_for_test == reads + 1, "XLA_FLAGS read %d times", xla::flag_reads_for_test - reads);

  // A module whose compile options turn command buffers off, then one that turns everything on.
  xla::DebugOptions off_module;
  xla::DebugOptions on_module;
  on_module.rocm_cmdbuf = on_module.rocm_cmdbuf_update_in_place = on_module.rocm_cmdbuf_trace_cache =
      on_module.rocm_cmdbuf_flatten_traced = true;
  const RocmCmdbufOptions off = RocmCmdbufOptionsFrom(off_module);
  const RocmCmdbufOptions on = RocmCmdbufOptionsFrom(on_module);
  {
    ScopedRocmCmdbufOptions module(off);
    CHECK(Same(CurrentRocmCmdbufOptions(), off) && !CurrentRocmCmdbufOptions().command_buffers,
          "a module's options override XLA_FLAGS");
    {
      ScopedRocmCmdbufOptions nested(on);
      CHECK(Same(CurrentRocmCmdbufOptions(), on), "the inner module's options");
      RocmCmdbufOptions other_thread;
      std::thread([&] { other_thread = CurrentRocmCmdbufOptions(); }).join();
      CHECK(Same(other_thread, from_flags), "another thread runs no module: the process's flags");
    }
    CHECK(Same(CurrentRocmCmdbufOptions(), off), "the outer module's options come back");
  }
  CHECK(Same(CurrentRocmCmdbufOptions(), from_flags), "after the module: the process's flags");

  // The stream cache and the profiler follow XLA_FLAGS only (here the profiler on, the stream
  // cache off, read at the first call). A module that sets either otherwise gets a warning,
  // once per flag; one that agrees, none.
  xla::DebugOptions xla_flags;
  xla_flags.rocm_cmdbuf_profiler = true;
  xla::process_flags_for_test = xla_flags;
  auto warnings = [] {
    int n = 0;
    for (const std::string& line : xla_flow_log::lines) n += line.rfind("WARNING: ", 0) == 0 ? 1 : 0;
    return n;
  };
  const int before = warnings();
  xla::DebugOptions agrees = xla_flags;
  WarnRocmCmdbufProcessFlags("agrees", agrees);
  CHECK(warnings() == before, "a module that agrees with XLA_FLAGS warned");
  xla::DebugOptions caches = xla_flags;
  caches.rocm_cmdbuf_stream_cache = true;
  WarnRocmCmdbufProcessFlags("caches", caches);
  const std::string warning = xla_flow_log::lines.back();
  CHECK(warnings() == before + 1 && warning.find("caches") != std::string::npos &&
            warning.find("--xla_gpu_rocm_cmdbuf_stream_cache=true") != std::string::npos &&
            warning.find("read once from XLA_FLAGS") != std::string::npos,
        "a module's stream cache flag: %s", warning.c_str());
  WarnRocmCmdbufProcessFlags("caches too", caches);
  CHECK(warnings() == before + 1, "the stream cache flag warned twice");
  xla::DebugOptions unprofiled = xla_flags;
  unprofiled.rocm_cmdbuf_profiler = false;
  WarnRocmCmdbufProcessFlags("unprofiled", unprofiled);
  WarnRocmCmdbufProcessFlags("unprofiled too", unprofiled);
  CHECK(warnings() == before + 2 &&
            xla_flow_log::lines.back().find("--xla_gpu_rocm_cmdbuf_profiler=false") != std::string::npos,
        "a module's profiler flag: %s", xla_flow_log::lines.back().c_str());
}

// Stand-ins of the two kinds of nested command buffer RocmCommandBuffer may be given.
class XlaNested : public stream_executor::CommandBuffer {
 public:
  State state() const override { return State::kFinalized; }
};
class LibraryNested : public stream_executor::CommandBuffer {
 public:
  explicit LibraryNested(void* graph) : graph_(graph) {}
  State state() const override { return State::kFinalized; }
  void* graph() const { return graph_; }

 private:
  void* graph_;
};

// NestedGraphForXla's shape: the graph of the library's nested command buffers only.
bool AnswerForLibrary(const stream_executor::CommandBuffer& nested, void** graph) {
  const auto* library = dynamic_cast<const LibraryNested*>(&nested);
  if (library == nullptr) return false;
  *graph = library->graph();
  return true;
}

void NestedGraph() {
  int template_graph = 0;
  XlaNested xla;
  LibraryNested library(&template_graph);
  void* graph = &template_graph;
  CHECK(!RocmCmdbufNestedGraph(xla, &graph) && !RocmCmdbufNestedGraph(library, &graph) &&
            graph == &template_graph,
        "before the library made a command buffer, every nested one is XLA's and nothing is written");
  SetRocmCmdbufNestedGraph(&AnswerForLibrary);
  graph = nullptr;
  CHECK(RocmCmdbufNestedGraph(library, &graph) && graph == &template_graph,
        "the library's nested command buffer answers with its graph");
  graph = nullptr;
  CHECK(!RocmCmdbufNestedGraph(xla, &graph) && graph == nullptr, "XLA's own nested command buffer is not the library's");
  SetRocmCmdbufNestedGraph(nullptr);
  std::printf("nested graph: XLA's command buffer asks the library's answer only once it is registered\n");
}

// The library through the loader: a command buffer that fills a buffer, launched and read back.
void Usable(Gpu& gpu) {
  CHECK(!LibraryLoaded(), "%s is loaded before any flag asked for it: the program links it", kRocmCmdbufLibrary);
  CallsRefused("before any flag asked");
  const size_t lines = xla_flow_log::lines.size();
  CHECK(LoadRocmCmdbuf("--xla_gpu_rocm_cmdbuf"), "the library did not load: %s",
        xla_flow_log::lines.empty() ? "" : xla_flow_log::lines.back().c_str());
  CHECK(LibraryLoaded(), "LoadRocmCmdbuf did not open %s", kRocmCmdbufLibrary);
  CHECK(LoadRocmCmdbuf("--xla_gpu_rocm_cmdbuf_profiler"), "a second flag");
  CHECK(ErrorLines() == 0 && xla_flow_log::lines.size() == lines + 1, "one line logged (%zu), no error (%d)",
        xla_flow_log::lines.size() - lines, ErrorLines());
  // The forwarders return the library's own results.
  void* handle = dlopen(kRocmCmdbufLibrary, RTLD_NOW | RTLD_NOLOAD);
  auto version = handle != nullptr ? reinterpret_cast<const char* (*)()>(dlsym(handle, "rcb_version")) : nullptr;
  CHECK(version != nullptr && rcb::Version() == version(), "rcb_version through the loader");
  if (handle != nullptr) dlclose(handle);

  Announce("xla_flow flags");
  constexpr uint64_t kN = 256;
  uint64_t out = gpu.Malloc(kN * 4);
  std::vector<uint32_t> garbage(kN, 0xdeadbeef);
  gpu.Write(out, garbage.data(), kN * 4);
  uint32_t value = 0x5eed;
  uint64_t n = kN;
  rcb_kernel_arg args[] = {{&out, 8, RCB_ARG_DEVICE_PTR}, {&value, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
  rcb::CmdBuf cb;
  OK(rcb::CmdBuf::Create(0, &cb));
  rcb_allocation table[] = {{out, kN * 4}};
  OK(cb.SetAllocations(table));
  rcb_node node = 0;
  OK(cb.AddKernel({}, rcb_kernel_launch{sizeof(rcb_kernel_launch), gpu.Function("rcb_test_fill_u32"), {1, 1, 1}, {256, 1, 1}, 0, args, 3},
                  &node));
  OK(cb.Finalize());
  OK(cb.Launch(gpu.stream()));
  gpu.Sync();
  std::vector<uint32_t> got(kN);
  gpu.Read(got.data(), out, kN * 4);
  CHECK_RESULT(got == std::vector<uint32_t>(kN, value), "the command buffer recorded through the loader");
  OK(cb.Free());
  gpu.Free(out);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "missing") {
    Unusable("cannot be opened");
  } else if (mode == "partial") {
    Unusable("has no rcb_cmdbuf_new");
  } else if (mode == "version") {
    // The next major: another interface (a minor release only adds, so a newer minor is taken).
    const std::string other = std::to_string(RCB_VERSION_MAJOR + 1) + ".0.0";
    Unusable(("is rocm_cmdbuf " + other + ", whose interface is not that of rocm_cmdbuf " +
              std::to_string(RCB_VERSION_MAJOR) + "." + std::to_string(RCB_VERSION_MINOR))
                 .c_str());
  } else {
    Options();
    NestedGraph();
    Gpu gpu;
    Usable(gpu);
  }
  return Finish(mode.empty() ? "xla_flow flags" : ("xla_flow flags (" + mode + ")").c_str());
}
