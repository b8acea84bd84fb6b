/* Stream calls that reach HIP by a tail call from an object the program dlopen'ed with
 * RTLD_LOCAL. Built with -DOBJECT -O2 (run.sh checks that each wrapper is a jump to HIP's PLT
 * entry), the object's wrappers leave no frame of their own: when the preload's interposer runs,
 * its caller is the program, which links no HIP and whose scope holds none. Every call must
 * still reach the runtime the object was linked against and succeed, as without the preload.
 * Built without it, the program: 10 rounds of 16 streams (two creation calls), each live
 * (hipStreamQuery) and distinct, then destroyed. Prints the creations hipsim saw, for run.sh to
 * compare with and without the preload. Usage: tail_call libtail.so */
#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#ifdef OBJECT
uint64_t hipsimGetCallCount(const char *name);

hipError_t tail_create(hipStream_t *s) { return hipStreamCreate(s); }
hipError_t tail_create_with_flags(hipStream_t *s, unsigned flags) { return hipStreamCreateWithFlags(s, flags); }
hipError_t tail_destroy(hipStream_t s) { return hipStreamDestroy(s); }
hipError_t tail_query(hipStream_t s) { return hipStreamQuery(s); }

uint64_t tail_creations(void) {
    return hipsimGetCallCount("hipStreamCreate") + hipsimGetCallCount("hipStreamCreateWithFlags") +
           hipsimGetCallCount("hipStreamCreateWithPriority");
}
#else
#include <dlfcn.h>

#define STREAMS 16
#define ROUNDS 10

int main(int argc, char **argv) {
    void *lib = argc == 2 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib) {
        fprintf(stderr, "usage: tail_call path/to/libtail.so (%s)\n", argc == 2 ? dlerror() : "no path");
        return 2;
    }
    hipError_t (*create)(hipStream_t *), (*create_with_flags)(hipStream_t *, unsigned);
    hipError_t (*destroy)(hipStream_t), (*query)(hipStream_t);
    uint64_t (*creations)(void);
    *(void **)&create = dlsym(lib, "tail_create");
    *(void **)&create_with_flags = dlsym(lib, "tail_create_with_flags");
    *(void **)&destroy = dlsym(lib, "tail_destroy");
    *(void **)&query = dlsym(lib, "tail_query");
    *(void **)&creations = dlsym(lib, "tail_creations");
    if (!create || !create_with_flags || !destroy || !query || !creations) return 2;
    for (int round = 0; round < ROUNDS; round++) {
        hipStream_t s[STREAMS];
        for (int i = 0; i < STREAMS; i++) {
            hipError_t rc = i % 2 ? create_with_flags(&s[i], hipStreamNonBlocking) : create(&s[i]);
            if (rc != hipSuccess || (rc = query(s[i])) != hipSuccess) {
                fprintf(stderr, "round %d stream %d: creation or query -> %d\n", round, i, (int)rc);
                return 1;
            }
            for (int j = 0; j < i; j++) {
                if (s[j] == s[i]) {
                    fprintf(stderr, "round %d: streams %d and %d are the same handle\n", round, j, i);
                    return 1;
                }
            }
        }
        for (int i = 0; i < STREAMS; i++) {
            hipError_t rc = destroy(s[i]);
            if (rc != hipSuccess) {
                fprintf(stderr, "round %d stream %d: hipStreamDestroy -> %d\n", round, i, (int)rc);
                return 1;
            }
        }
    }
    printf("stream creations: %llu\n", (unsigned long long)creations());
    return 0;
}
#endif
