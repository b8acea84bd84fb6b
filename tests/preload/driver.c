/* Runs the workload linked at start-up or, built with -DLATE, from a dlopen (RTLD_LOCAL) made
 * after main started, so that HIP never enters the global scope (as when Python loads jaxlib). */
#include <dlfcn.h>
#include <stdio.h>

#ifdef LATE
int main(int argc, char **argv) {
    void *lib = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib) {
        fprintf(stderr, "usage: late path/to/libworkload.so (%s)\n", argc > 1 ? dlerror() : "no path");
        return 1;
    }
    int (*run)(void) = (int (*)(void))dlsym(lib, "run_workload");
    return run ? run() : 1;
}
#else
int run_workload(void);

int main(void) {
    return run_workload();
}
#endif
