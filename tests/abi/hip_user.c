/* A program linked against ROCm's libamdhip64 references the stream functions with HIP's symbol
 * version (hipStreamCreate@hip_4.2, ...). run.sh starts it with librocm_cmdbuf_preload.so
 * preloaded and reads from the loader which object each reference bound to; the functions are
 * never called (no GPU is needed). */
#include <hip/hip_runtime_api.h>

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1000) {
        hipStream_t s;
        return (int)hipStreamCreate(&s) + (int)hipStreamCreateWithFlags(&s, 0) +
               (int)hipStreamCreateWithPriority(&s, 0, 0) + (int)hipStreamDestroy(s) + (int)hipDeviceReset();
    }
    return 0;
}
