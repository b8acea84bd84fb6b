/* What a long-lived process does to streams, through the preload (run.sh runs each mode with and
 * without it: the answers must be plain HIP's either way).
 *   double-destroy  a second hipStreamDestroy of a stream gets hipErrorInvalidHandle, and the
 *                   next creations get live streams
 *   racing-destroy  two threads destroy one stream at once, 200 times: one destroy succeeds, the
 *                   other gets hipErrorInvalidHandle, and the next creation is a live stream
 *                   (hipStreamQuery takes 1 ms and hipStreamDestroy 3 ms, so that the second
 *                   destroy comes while the preload's first one asks whether the stream is idle,
 *                   and a real destroy takes effect after that answer)
 *   reset           hipDeviceReset destroys the device's streams: the next creation gets a live
 *                   one, and a destroy of a stream from before the reset gets hipErrorInvalidHandle
 *   reset-no-device the same when hipGetDevice fails (injected) inside hipDeviceReset
 *   flag-bits       (HIPSIM_QUIRKS=stream_flag_bits) a runtime that reports flag bits of its own:
 *                   prints the creations hipsim saw, for run.sh to compare
 *   fork            forks 40 times while a thread creates and destroys streams without pause:
 *                   every child creates, queries and destroys streams of its own within 10 s
 *                   (never one of the parent's) and exits 0
 * Exits 0 when every check holds, 1 otherwise. */
/* pthread barriers are POSIX, outside plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <hip/hip_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

uint64_t hipsimGetCallCount(const char *name);
int hipsimSetFaults(const char *spec);
int hipsimSetLatency(const char *spec);

static int failures = 0;
#define EXPECT(c, ...) do { if (!(c)) { fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); failures++; } } while (0)
#define CHECK(x) do { hipError_t e_ = (x); if (e_ != hipSuccess) { \
    fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)e_); exit(1); } } while (0)

static void double_destroy(void) {
    hipStream_t a, b;
    CHECK(hipStreamCreate(&a));
    CHECK(hipStreamDestroy(a));
    EXPECT(hipStreamDestroy(a) == hipErrorInvalidHandle, "a second destroy must be refused");
    for (int i = 0; i < 2; i++) {
        CHECK(hipStreamCreate(&b));
        EXPECT(hipStreamQuery(b) == hipSuccess, "creation %d after the double destroy is not a live stream", i);
        EXPECT(hipStreamSynchronize(b) == hipSuccess, "creation %d cannot be synchronized", i);
        CHECK(hipStreamDestroy(b));
    }
}

/* Two threads destroy `shared` between the same barriers; the main thread then creates a stream
 * and queries it. */
static hipStream_t shared;
static hipError_t racing_rc[2];
static pthread_barrier_t race_start, race_end;

static void *racing_destroyer(void *arg) {
    int which = (int)(intptr_t)arg;
    for (;;) {
        pthread_barrier_wait(&race_start);
        if (shared == NULL) return NULL;
        racing_rc[which] = hipStreamDestroy(shared);
        pthread_barrier_wait(&race_end);
    }
}

static void racing_destroy(void) {
    enum { ROUNDS = 200 };
    pthread_t threads[2];
    if (hipsimSetLatency("hipStreamQuery:1ms,hipStreamDestroy:3ms") != 0) exit(1);
    if (pthread_barrier_init(&race_start, NULL, 3) != 0 || pthread_barrier_init(&race_end, NULL, 3) != 0) exit(1);
    for (int i = 0; i < 2; i++) {
        if (pthread_create(&threads[i], NULL, racing_destroyer, (void *)(intptr_t)i) != 0) exit(1);
    }
    int dead = 0, both = 0, neither = 0;
    for (int round = 0; round < ROUNDS; round++) {
        CHECK(hipStreamCreate(&shared));
        pthread_barrier_wait(&race_start);
        pthread_barrier_wait(&race_end);
        int ok = (racing_rc[0] == hipSuccess) + (racing_rc[1] == hipSuccess);
        int refused = (racing_rc[0] == hipErrorInvalidHandle) + (racing_rc[1] == hipErrorInvalidHandle);
        both += ok == 2;
        neither += ok != 1 || refused != 1;
        hipStream_t next;
        CHECK(hipStreamCreate(&next));
        dead += hipStreamQuery(next) != hipSuccess;
        /* A dead stream's destroy is refused, a live one's succeeds: either way it is gone. */
        (void)hipStreamDestroy(next);
    }
    shared = NULL;
    pthread_barrier_wait(&race_start);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    if (hipsimSetLatency("") != 0) exit(1);
    EXPECT(dead == 0, "%d of %d creations after two racing destroys handed out a dead stream", dead, ROUNDS);
    EXPECT(neither == 0, "%d of %d racing pairs were not one success and one hipErrorInvalidHandle (%d: both succeeded)",
           neither, ROUNDS, both);
}

/* With no_device, the first hipGetDevice from the reset on fails (the preload's hipDeviceReset
 * reads the current device; a program's own reset does not). */
static void reset(int no_device) {
    hipStream_t idle, held, fresh;
    CHECK(hipStreamCreate(&idle));
    CHECK(hipStreamCreate(&held));
    CHECK(hipStreamDestroy(idle));
    if (no_device && hipsimSetFaults("hipGetDevice:1:100") != 0) exit(1);
    CHECK(hipDeviceReset());
    if (no_device && hipsimSetFaults("") != 0) exit(1);
    CHECK(hipStreamCreate(&fresh));
    EXPECT(hipStreamQuery(fresh) == hipSuccess, "the creation after hipDeviceReset is not a live stream");
    EXPECT(hipStreamDestroy(held) == hipErrorInvalidHandle, "a stream from before the reset was destroyed again");
    CHECK(hipStreamDestroy(fresh));
}

static void flag_bits(void) {
    for (int i = 0; i < 10; i++) {
        hipStream_t s;
        CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
        CHECK(hipStreamDestroy(s));
    }
    printf("stream creations: %llu\n", (unsigned long long)hipsimGetCallCount("hipStreamCreateWithPriority") +
                                           hipsimGetCallCount("hipStreamCreateWithFlags"));
}

/* Every stream the parent's hammering thread has had, for a child to check against. */
#define SEEN 4096
static hipStream_t seen[SEEN];
static atomic_int seen_count;
static atomic_int stop;

static void *hammer(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        hipStream_t s;
        if (hipStreamCreate(&s) != hipSuccess) return (void *)1;
        int n = atomic_load(&seen_count);
        int known = 0;
        for (int i = 0; i < n; i++) known |= seen[i] == s;
        if (!known && n < SEEN) {
            seen[n] = s;
            atomic_store(&seen_count, n + 1);
        }
        if (hipStreamDestroy(s) != hipSuccess) return (void *)1;
    }
    return NULL;
}

static int child(void) {
    alarm(10); /* a deadlock ends as SIGALRM, never as a hang */
    int n = atomic_load(&seen_count);
    for (int round = 0; round < 3; round++) {
        hipStream_t s;
        if (hipStreamCreate(&s) != hipSuccess) return 2;
        for (int i = 0; i < n; i++) {
            if (seen[i] == s) return 3;
        }
        if (hipStreamQuery(s) != hipSuccess || hipStreamDestroy(s) != hipSuccess) return 4;
    }
    return 0;
}

static void forks(void) {
    pthread_t thread;
    hipStream_t warm;
    CHECK(hipStreamCreate(&warm)); /* the pool exists before the first fork */
    CHECK(hipStreamDestroy(warm));
    if (pthread_create(&thread, NULL, hammer, NULL) != 0) exit(1);
    while (atomic_load(&seen_count) == 0) sched_yield();
    for (int i = 0; i < 40; i++) {
        pid_t pid = fork();
        if (pid == 0) _exit(child());
        int status = 0;
        EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid, "fork %d failed", i);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %s %d (2: create failed, 3: got a parent's stream, 4: query or destroy failed)",
               i, WIFSIGNALED(status) ? "killed by signal" : "exit status",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    atomic_store(&stop, 1);
    void *rc = NULL;
    pthread_join(thread, &rc);
    EXPECT(rc == NULL, "the hammering thread failed");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "double-destroy") == 0) double_destroy();
    else if (strcmp(mode, "racing-destroy") == 0) racing_destroy();
    else if (strcmp(mode, "reset") == 0) reset(0);
    else if (strcmp(mode, "reset-no-device") == 0) reset(1);
    else if (strcmp(mode, "flag-bits") == 0) flag_bits();
    else if (strcmp(mode, "fork") == 0) forks();
    else {
        fprintf(stderr, "usage: lifecycle double-destroy|racing-destroy|reset|reset-no-device|flag-bits|fork\n");
        return 2;
    }
    if (failures == 0) printf("%s: ok\n", mode);
    return failures ? 1 : 0;
}
