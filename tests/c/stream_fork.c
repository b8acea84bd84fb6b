/* The library's stream cache across fork(): 40 forks while a thread acquires and releases
 * streams without pause, with idle streams of the parent's in the cache at every fork. Each child
 * must acquire, query and release streams of its own within 10 s (a lock of the parent's cache
 * left held ends it with SIGALRM), never one the parent had, and must find the parent's idle
 * streams gone from its cache's counters.
 *
 * Build: against include/rocm_cmdbuf.h and Debian's HIP headers, linked with -lrocm_cmdbuf,
 * hipsim's libamdhip64.so and -pthread; see run.sh.
 * Usage: RCB_BACKEND=hip RCB_HIP_LIBRARY=<the hipsim file the program loaded> stream_fork all
 * (its one mode). Exits 0 when every check holds, 1 otherwise. */
#include "sim.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

/* Every stream the parent has had, for a child to check against. */
#define SEEN 4096
static void *seen[SEEN];
static atomic_int seen_count;
static atomic_int stop;

static void remember(void *s) {
    int n = atomic_load(&seen_count);
    for (int i = 0; i < n; i++) {
        if (seen[i] == s) return;
    }
    if (n < SEEN) {
        seen[n] = s;
        atomic_store(&seen_count, n + 1);
    }
}

static void *hammer(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        void *s;
        if (rcb_stream_acquire(0, 0, 0, &s) != RCB_OK) return (void *)1;
        remember(s);
        if (rcb_stream_release(s) != RCB_OK) return (void *)1;
    }
    return NULL;
}

/* 2: acquire or release failed, 3: got a parent's stream, 4: not a live stream, 5: the parent's
 * idle streams are in the child's cache. */
static int child(int unused) {
    (void)unused;
    alarm(10);
    int n = atomic_load(&seen_count);
    rcb_stream_stats stats;
    SIZED(stats);
    if (rcb_stream_cache_stats(-1, &stats) != RCB_OK) return 2;
    if (stats.kept != 0 || stats.in_use != 0) return 5;
    for (int round = 0; round < 3; round++) {
        void *s;
        if (rcb_stream_acquire(0, 0, 0, &s) != RCB_OK) return 2;
        for (int i = 0; i < n; i++) {
            if (seen[i] == s) return 3;
        }
        if (hipStreamQuery((hipStream_t)s) != hipSuccess) return 4;
        if (rcb_stream_release(s) != RCB_OK) return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 || strcmp(argv[1], "all") != 0) {
        fprintf(stderr, "usage: stream_fork all\n");
        return 2;
    }
    /* Idle streams in the parent's cache before any fork: two of one key. */
    void *a, *b;
    RCB(rcb_stream_acquire(0, 0, 0, &a));
    RCB(rcb_stream_acquire(0, 0, 0, &b));
    remember(a);
    remember(b);
    RCB(rcb_stream_release(a));
    RCB(rcb_stream_release(b));
    rcb_stream_stats stats;
    SIZED(stats);
    RCB(rcb_stream_cache_stats(-1, &stats));
    CHECK(stats.kept == 2, "the parent keeps %llu idle streams, expected 2", (unsigned long long)stats.kept);

    pthread_t thread;
    if (pthread_create(&thread, NULL, hammer, NULL) != 0) return 1;
    for (int i = 0; i < 40; i++) {
        fork_and_check(i, child, 0,
                       "2: a call failed, 3: got a parent's stream, 4: not live, 5: parent's streams cached");
        sched_yield();
    }
    atomic_store(&stop, 1);
    void *rc = NULL;
    pthread_join(thread, &rc);
    CHECK(rc == NULL, "the hammering thread's acquire or release failed");
    if (failures == 0) printf("stream_fork: ok\n");
    return failures ? 1 : 0;
}
