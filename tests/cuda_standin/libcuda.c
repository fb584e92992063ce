/* A stand-in libcuda.so.1 for tests: cuInit only, with cuda.h's signature
 * (CUresult cuInit(unsigned int Flags)), answering what GPUDIAG_STANDIN_CUINIT says:
 * a CUresult number (0, 802, ...), or "hang" to never return (a driver that hangs).
 * Flags must be 0, as cuda.h requires (CUDA_ERROR_INVALID_VALUE, 1, otherwise). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cuInit(unsigned int flags) {
    const char *answer = getenv("GPUDIAG_STANDIN_CUINIT");
    if (flags != 0) return 1;
    if (answer && !strcmp(answer, "hang"))
        for (;;) pause();
    return answer ? atoi(answer) : 0;
}
