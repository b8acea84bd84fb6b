/* RCB_STATS: the report the library prints when it is unloaded at exit. The program makes the
 * library count known things (a command buffer recorded and finalized, one move patched in
 * place, one move refused as a changed table), reads the process counters the report is made of
 * (rcb_counters_get(NULL)), prints them on stdout as `name value` lines and exits through exit():
 * run.sh compares those lines with the report (the file RCB_STATS names, or stderr with
 * RCB_STATS=1) and checks that nothing is printed without RCB_STATS. Needs the software GPU
 * (RCB_BACKEND=hip, RCB_HIP_LIBRARY set; see run.sh). Exits 0 when every check holds. */
#include "sim.h"

#include <stdint.h>
#include <stdio.h>

int main(void) {
    gpu_open();
    void *x = upload_u32(0), *y = upload_u32(0);
    rcb_cmdbuf *cb = NULL;
    RCB(rcb_cmdbuf_new(0, &cb));
    rcb_allocation table[2] = {{dptr(x), BYTES}, {dptr(y), BYTES}};
    RCB(rcb_cmdbuf_set_allocations(cb, table, 2));
    rcb_node fill = add_fill(cb, NULL, 0, x, 7);
    add_axpy(cb, &fill, 1, y, x, 2.0f);
    RCB(rcb_cmdbuf_finalize(cb));
    launch_and_wait(cb);

    /* One move patched in place. */
    void *x2 = upload_u32(0);
    rcb_allocation moved[2] = {{dptr(x2), BYTES}, {dptr(y), BYTES}};
    rcb_update_report report = {.struct_size = sizeof report};
    RCB(rcb_cmdbuf_update_allocations(cb, moved, 2, &report));
    CHECK(report.moved_allocations == 1 && report.needs_rerecord == 0, "the move is patched in place");
    launch_and_wait(cb);
    /* One refused: a table with another size is a shape change (re-record). */
    rcb_allocation resized[2] = {{dptr(x2), BYTES / 2}, {dptr(y), BYTES}};
    report = (rcb_update_report){.struct_size = sizeof report};
    RCB(rcb_cmdbuf_update_allocations(cb, resized, 2, &report));
    CHECK(report.needs_rerecord == 1, "a resized allocation is refused");
    RCB(rcb_cmdbuf_free(cb));

    rcb_counters c = {.struct_size = sizeof c};
    RCB(rcb_counters_get(NULL, &c));
    CHECK(c.captures == 0 && c.instantiations == 1 && c.address_updates == 1 && c.retired_execs == 1, "counters: %llu captures, %llu instantiations, %llu updates", (unsigned long long)c.captures, (unsigned long long)c.instantiations, (unsigned long long)c.address_updates);
    CHECK(c.fallbacks[RCB_FALLBACK_SHAPE_CHANGED] == 1 && c.fallbacks_total == 1, "one fallback, shape_changed");
    printf("stream captures %llu\n", (unsigned long long)c.captures);
    printf("instantiations %llu\n", (unsigned long long)c.instantiations);
    printf("address updates in place %llu\n", (unsigned long long)c.address_updates);
    printf("executable-node pushes %llu\n", (unsigned long long)c.exec_param_pushes);
    printf("executable graphs destroyed %llu\n", (unsigned long long)c.retired_execs);
    printf("fallbacks %llu\n", (unsigned long long)c.fallbacks_total);
    printf("shape_changed %llu\n", (unsigned long long)c.fallbacks[RCB_FALLBACK_SHAPE_CHANGED]);

    HIP(hipFree(x));
    HIP(hipFree(x2));
    HIP(hipFree(y));
    gpu_close();
    return failures ? 1 : 0;
}
