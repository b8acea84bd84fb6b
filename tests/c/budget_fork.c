/* The update budget across fork(): the process's first command buffer is made on a thread of its
 * own and measures the budget (each of the probe's 16 384 memset-node updates slowed to 100 us
 * by HIPSIM_LATENCY, so that it runs for seconds), while the main thread forks three times. Each
 * child must make a command buffer of its own within 10 s (a measurement its parent left
 * half-made in it would make it wait for ever: SIGALRM), get the fixed default without measuring
 * anything (the runtime's locks may be held in the child by the parent's measuring thread), and
 * the parent's measurement must finish as usual. A child forked after it keeps the parent's
 * budget.
 *
 * Build: against include/rocm_cmdbuf.h and Debian's HIP headers, linked with -lrocm_cmdbuf,
 * hipsim's libamdhip64.so and -pthread; see run.sh.
 * Usage: RCB_BACKEND=hip RCB_HIP_LIBRARY=<the hipsim file the program loaded>
 * HIPSIM_LATENCY=hipGraphExecMemsetNodeSetParams:100us budget_fork all (its one mode). Exits 0
 * when every check holds, 1 otherwise. */
#include "sim.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The fixed default of a HIP runtime: 64 MiB, charged 5 920 bytes a node push. */
#define DEFAULT_BUDGET (64ull << 20)

static int child(int measured);

/* What a child's exit status other than 0 means. */
static const char *const CODES = "2: no command buffer, 3: not the expected budget, 4: measured";

static void *first_command_buffer(void *arg) {
    (void)arg;
    rcb_cmdbuf *cb;
    if (rcb_cmdbuf_new(0, &cb) != RCB_OK) return (void *)1;
    rcb_cmdbuf_free(cb);
    return NULL;
}

static int settled_as(rcb_runtime_info *info) {
    SIZED(*info);
    return rcb_runtime_load(info) == RCB_OK;
}

/* 2: no command buffer, 3: the budget is not the fixed default (measured: the parent's, when
 * it had settled it before the fork), 4: something was measured. */
static int child(int measured) {
    alarm(10);
    /* The parent's measuring thread is not here: the count stays. */
    uint64_t updates = hipsimGetCallCount("hipGraphExecMemsetNodeSetParams");
    rcb_cmdbuf *cb;
    if (rcb_cmdbuf_new(0, &cb) != RCB_OK) return 2;
    uint64_t budget = 0, spent = 1;
    if (rcb_cmdbuf_exec_update_budget(cb, &budget, &spent) != RCB_OK || budget != DEFAULT_BUDGET) return 3;
    rcb_runtime_info info;
    int basis = measured ? RCB_UPDATE_BUDGET_MEASURED : RCB_UPDATE_BUDGET_DEFAULT;
    if (!settled_as(&info) || info.update_budget_basis != basis) return 3;
    if (hipsimGetCallCount("hipGraphExecMemsetNodeSetParams") != updates) return 4;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 || strcmp(argv[1], "all") != 0) {
        fprintf(stderr, "usage: budget_fork all\n");
        return 2;
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, first_command_buffer, NULL) != 0) return 1;
    uint64_t at[] = {1, 2000, 4000};
    for (int i = 0; i < 3; i++) {
        /* Fork once the probe has made that many updates, while it still has thousands to go. */
        while (hipsimGetCallCount("hipGraphExecMemsetNodeSetParams") < at[i]) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
        rcb_runtime_info info;
        CHECK(settled_as(&info) && info.update_budget_basis == RCB_UPDATE_BUDGET_UNSETTLED,
              "the parent settled its budget before fork %d: slow the probe down", i);
        fork_and_check(i, child, 0, CODES);
    }
    void *rc = NULL;
    pthread_join(thread, &rc);
    CHECK(rc == NULL, "the parent's first command buffer failed: %s", last_error());
    rcb_runtime_info info;
    CHECK(settled_as(&info) && info.update_budget_basis == RCB_UPDATE_BUDGET_MEASURED,
          "the parent's budget is not measured (basis %d)", (int)info.update_budget_basis);
    /* Forked after the measurement: the child keeps the parent's budget and measures nothing. */
    fork_and_check(3, child, 1, CODES);
    if (failures == 0) printf("budget_fork: ok\n");
    return failures ? 1 : 0;
}
