/* HIP as XLA up to rocm-jaxlib-v0.8.0 takes it (STREAM_EXECUTOR_HIP_WRAP through TSL's
 * CachedDsoLoader), for programs built with -DTSL_LOADER: no HIP linked, the runtime dlopen'ed by
 * its soname (HIP_SONAME, found through the caller's runpath) with RTLD_NOW | RTLD_LOCAL once,
 * then each function taken from that handle with dlsym(handle, name) on its first call.
 * WRAP(hipStreamCreate)(&s) calls the function so found; without -DTSL_LOADER it is a plain
 * call. */
#ifndef RCB_TESTS_PRELOAD_TSL_LOADER_H
#define RCB_TESTS_PRELOAD_TSL_LOADER_H

#ifdef TSL_LOADER
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef HIP_SONAME
#define HIP_SONAME "libamdhip64.so.6"
#endif

static void *hip_symbol(const char *name) {
    static void *handle;
    if (!handle && !(handle = dlopen(HIP_SONAME, RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "dlopen %s: %s\n", HIP_SONAME, dlerror());
        exit(1);
    }
    void *f = dlsym(handle, name);
    if (!f) {
        fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

#define WRAP(name) (*({ \
    static __typeof__(&name) f_; \
    if (!f_) f_ = (__typeof__(&name))hip_symbol(#name); \
    f_; }))
#else
#define WRAP(name) name
#endif

#endif
