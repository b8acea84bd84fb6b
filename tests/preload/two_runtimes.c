/* Two HIP runtimes in one process (two frameworks, each with the libamdhip64 it bundles): two
 * copies of the software GPU under different sonames, each behind a user object dlopen'ed with
 * RTLD_LOCAL (runtime_user.c). Phase 1, runtime A alone: 10 rounds of 4 streams. Phase 2, B
 * loaded too: 10 rounds in which B and then A each create 4 streams, every one live in its own
 * runtime and none seen by the other (its live count does not move), then destroy them. Every
 * call must succeed. Prints the streams each phase made, for run.sh to compare with and
 * without the preload: with it, phase 1 reuses cached streams and phase 2 makes every stream
 * anew (the cache stands aside from the first call of a second runtime on). Usage:
 * two_runtimes libuser_a.so libuser_b.so */
#include <dlfcn.h>
#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#define N 4
#define ROUNDS 10

struct user {
    int (*create)(int, hipStream_t *);
    int (*destroy)(int, hipStream_t *);
    uint64_t (*creations)(void);
    uint64_t (*live)(void);
};

static int open_user(const char *path, struct user *u) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    *(void **)&u->create = dlsym(lib, "user_create");
    *(void **)&u->destroy = dlsym(lib, "user_destroy");
    *(void **)&u->creations = dlsym(lib, "user_creations");
    *(void **)&u->live = dlsym(lib, "user_live");
    return !(u->create && u->destroy && u->creations && u->live);
}

int main(int argc, char **argv) {
    struct user a, b;
    hipStream_t ha[N], hb[N];
    if (argc != 3 || open_user(argv[1], &a)) return 2;
    uint64_t made = a.creations();
    for (int r = 0; r < ROUNDS; r++) {
        if (a.create(N, ha) || a.destroy(N, ha)) return 1;
    }
    printf("phase 1 creations: %llu\n", (unsigned long long)(a.creations() - made));
    if (open_user(argv[2], &b)) return 2;
    made = a.creations() + b.creations();
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t live_a = a.live();
        if (b.create(N, hb)) return 1;
        uint64_t live_b = b.live();
        if (a.create(N, ha)) return 1;
        if (b.live() != live_b || a.live() != live_a + N) {
            fprintf(stderr, "round %d: live streams A %llu (was %llu + %d), B %llu (was %llu)\n", r,
                    (unsigned long long)a.live(), (unsigned long long)live_a, N, (unsigned long long)b.live(),
                    (unsigned long long)live_b);
            return 1;
        }
        if (a.destroy(N, ha) || b.destroy(N, hb)) return 1;
        if (a.live() != live_a) {
            fprintf(stderr, "round %d: A keeps %llu streams, had %llu\n", r, (unsigned long long)a.live(),
                    (unsigned long long)live_a);
            return 1;
        }
    }
    printf("phase 2 creations: %llu\n", (unsigned long long)(a.creations() + b.creations() - made));
    return 0;
}
