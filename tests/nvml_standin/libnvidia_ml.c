/* A stand-in libnvidia-ml.so.1 for tests: nvml.h's signatures and structure layouts,
 * answering from a recording (a flat file written by tests/standin.py from a replay or
 * a capture), as strict as the real library about the pointers it is given.
 *
 * Environment:
 *   GPUDIAG_STANDIN_DATA  the flat recording (required; nvmlInit fails without it)
 *   GPUDIAG_STANDIN_LOG   append one line per call here (optional)
 *   GPUDIAG_STANDIN_UNCHECKED  set: skip the pointer checks below, which read
 *                         /proc/self/maps on every call (a benchmark's timing only)
 *
 * Flat recording, one record per line, fields separated by tabs:
 *   I <code>                                  nvmlInit fails with this code
 *   S <function> <argkey> <code> <values...>  a system call
 *   D <gpu> <function> <argkey> <code> <values...>
 *   L <gpu> <code>                            every call on this GPU fails (a lost GPU)
 * A call recorded on several lines answers them in turn, one per call, then repeats the
 * last (a series of volatile readings).
 * <function> is the name gpudiag records (nvmlDeviceGetPciInfo answers _v3), <argkey>
 * the call's arguments joined by ',' ('-' for none; a peer GPU by its index), <code>
 * NVML's return code (0: success, then the values in nvml.h's field order).
 *
 * Every out-pointer is checked before anything is written: it must lie, with the whole
 * structure, inside a writable mapping of this process, and not in the calling thread's
 * stack (ctypes keeps every object on the heap; a stack address is the argument area of
 * a structure passed by value, or garbage). A bad pointer is logged and the process
 * aborts, as the real library would crash: the test fails, not a user.
 *
 * Compiled twice (tests/standin.py): the current driver, and with -DOLD_DRIVER an older
 * one without the _v3 process calls, nvmlDeviceGetGpuFabricInfoV, the clock event
 * reasons, nvmlDeviceGetMarginTemperature and nvmlDeviceGetMemoryInfo_v2.
 * The fabric info calls (v2, v3 and v4 structures) and the C2C mode are in fabric.c.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

/* ---- nvml.h (the public header's types, as the driver defines them) ---------------- */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct nvmlBAR1Memory_st {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlProcessInfo_v2_st { /* nvmlProcessInfo_t, for _v2 and _v3 */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_GPU_FABRIC_UUID_LEN 16
typedef unsigned char nvmlGpuFabricState_t;
typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;

#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml##data##_v##ver##_t) | (ver << 24U))
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(GpuFabricInfo, 2)
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(GpuFabricInfo, 3)
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct {
    unsigned int version;
    int marginTemperature;
} nvmlMarginTemperature_v1_t;
#define nvmlMarginTemperature_v1 NVML_STRUCT_VERSION(MarginTemperature, 1)

typedef enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
} nvmlValueType_t;

typedef union nvmlValue_st {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* ---- the recording ------------------------------------------------------------------ */
#define MAX_GPUS 64
struct nvmlDevice_st { int index; };
static struct nvmlDevice_st devices[MAX_GPUS];
static int init_count;
static int init_error;
static int lost[MAX_GPUS];
static int gpu_count;
typedef struct {
    int gpu; /* -1: system */
    char *function;
    char *argkey;
    int code;
    char **values;
    int nvalues;
    int used; /* answered once already: a later record of the same call answers next */
} record_t;
static record_t *records;
static int nrecords;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *logfile;

static void log_line(const char *fmt, ...) {
    if (!logfile) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&lock);
    vfprintf(logfile, fmt, ap);
    fputc('\n', logfile);
    fflush(logfile);
    pthread_mutex_unlock(&lock);
    va_end(ap);
}

static char **split_tabs(char *line, int *count) {
    int n = 1;
    for (char *p = line; *p; p++) n += *p == '\t';
    char **fields = calloc(n, sizeof *fields);
    int i = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, "\t", &save); tok; tok = strtok_r(NULL, "\t", &save))
        fields[i++] = tok;
    *count = i;
    return fields;
}

static int load_recording(void) {
    const char *path = getenv("GPUDIAG_STANDIN_DATA");
    const char *log_path = getenv("GPUDIAG_STANDIN_LOG");
    if (log_path && !logfile) logfile = fopen(log_path, "a");
    if (!path) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    FILE *f = fopen(path, "r");
    if (!f) return 9;
    records = NULL;
    nrecords = 0;
    gpu_count = 0;
    init_error = 0;
    memset(lost, 0, sizeof lost);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] == '\n') line[--len] = 0;
        if (!len || line[0] == '#') continue;
        int n;
        char **fields = split_tabs(strdup(line), &n);
        if (fields[0][0] == 'I' && n >= 2) {
            init_error = atoi(fields[1]);
        } else if (fields[0][0] == 'L' && n >= 3) {
            int gpu = atoi(fields[1]);
            if (gpu >= 0 && gpu < MAX_GPUS) lost[gpu] = atoi(fields[2]);
        } else if (fields[0][0] == 'N' && n >= 2) {
            gpu_count = atoi(fields[1]);
        } else if ((fields[0][0] == 'S' && n >= 4) || (fields[0][0] == 'D' && n >= 5)) {
            int off = fields[0][0] == 'D';
            records = realloc(records, (nrecords + 1) * sizeof *records);
            record_t *r = &records[nrecords++];
            r->gpu = off ? atoi(fields[1]) : -1;
            r->function = fields[1 + off];
            r->argkey = fields[2 + off];
            r->code = atoi(fields[3 + off]);
            r->values = fields + 4 + off;
            r->nvalues = n - 4 - off;
            r->used = 0;
        }
    }
    free(line);
    fclose(f);
    if (gpu_count > MAX_GPUS) gpu_count = MAX_GPUS;
    for (int i = 0; i < MAX_GPUS; i++) devices[i].index = i;
    return 0;
}

/* ---- pointer checks ---------------------------------------------------------------- */
static int in_writable_mapping(uintptr_t start, size_t size, uintptr_t *map_lo, uintptr_t *map_hi) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return 0;
    char line[512];
    int ok = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (start >= lo && start < hi) {
            ok = perms[1] == 'w' && start + size <= hi;
            *map_lo = lo;
            *map_hi = hi;
            break;
        }
    }
    fclose(maps);
    return ok;
}

/* A pointer NVML would write `size` bytes to. NULL is the caller's choice (returns 0);
 * anything else that is not plausible aborts. */
static int check_out(const char *function, const void *pointer, size_t size) {
    if (!pointer) {
        log_line("NULL %s: a NULL out-pointer (%zu bytes)", function, size);
        return 0;
    }
    static int unchecked = -1; /* benchmarks/monitor_budget.py times gpudiag, not this check */
    if (unchecked < 0) unchecked = getenv("GPUDIAG_STANDIN_UNCHECKED") != NULL;
    if (unchecked) return 1;
    uintptr_t lo = 0, hi = 0, stack_lo = 0, stack_hi = 0;
    int writable = in_writable_mapping((uintptr_t)pointer, size, &lo, &hi);
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) { /* this thread's own stack */
        void *stack_addr;
        size_t stack_size;
        if (pthread_attr_getstack(&attr, &stack_addr, &stack_size) == 0) {
            stack_lo = (uintptr_t)stack_addr;
            stack_hi = stack_lo + stack_size;
        }
        pthread_attr_destroy(&attr);
    }
    const char *why = NULL;
    if (!writable)
        why = "not inside a writable mapping";
    else if ((uintptr_t)pointer >= stack_lo && (uintptr_t)pointer < stack_hi)
        why = "points into the calling thread's stack (a structure passed by value?)";
    if (why) {
        log_line("BADPOINTER %s: %p for %zu bytes %s", function, pointer, size, why);
        fprintf(stderr, "libnvidia-ml stand-in: %s got out-pointer %p (%zu bytes): %s\n",
                function, pointer, size, why);
        abort();
    }
    return 1;
}

#define OUT(p) do { if (!check_out(__func__, (p), sizeof *(p))) return NVML_ERROR_INVALID_ARGUMENT; } while (0)

/* ---- answering ---------------------------------------------------------------------- */
typedef struct {
    record_t *record;
    int next;
} answer_t;

static int device_index(nvmlDevice_t device) {
    if ((uintptr_t)device < (uintptr_t)devices ||
        (uintptr_t)device >= (uintptr_t)(devices + gpu_count) ||
        ((uintptr_t)device - (uintptr_t)devices) % sizeof devices[0])
        return -1;
    return device->index;
}

/* Find the record of a call; returns the code to hand back (0: read a->record's values). */
static nvmlReturn_t lookup(const char *symbol, const char *function, nvmlDevice_t device,
                           const char *argkey, answer_t *a) {
    a->record = NULL;
    a->next = 0;
    int gpu = -1;
    nvmlReturn_t code;
    if (!init_count) {
        code = NVML_ERROR_UNINITIALIZED;
        goto out;
    }
    if ((strncmp(function, "nvmlDevice", 10) == 0 && strcmp(function, "nvmlDeviceGetCount")) ||
        strncmp(function, "gpudiag", 7) == 0 || strncmp(function, "nvmlGpm", 7) == 0) {
        gpu = device_index(device);
        if (gpu < 0) {
            code = NVML_ERROR_INVALID_ARGUMENT;
            goto out;
        }
        if (lost[gpu]) {
            code = lost[gpu];
            goto out;
        }
    }
    /* a call recorded several times answers each record in turn, then the last again
     * (a series of volatile readings, as `gpudiag capture --samples` takes them) */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nrecords; i++) {
        record_t *r = &records[i];
        if (r->gpu == gpu && !strcmp(r->function, function) && !strcmp(r->argkey, argkey)) {
            a->record = r;
            if (!r->used) break;
        }
    }
    if (a->record) a->record->used = 1;
    pthread_mutex_unlock(&lock);
    if (a->record) {
        code = a->record->code;
        goto out;
    }
    log_line("UNRECORDED %s gpu=%d args=%s", function, gpu, argkey);
    code = NVML_ERROR_UNKNOWN;
out:
    log_line("CALL %s gpu=%d args=%s -> %d", symbol, gpu, argkey, code);
    return code;
}

static const char *next_text(answer_t *a) {
    if (!a->record || a->next >= a->record->nvalues) return "";
    return a->record->values[a->next++];
}
static unsigned long long next_u(answer_t *a) { return strtoull(next_text(a), NULL, 0); }
static long long next_i(answer_t *a) { return strtoll(next_text(a), NULL, 0); }

static nvmlReturn_t copy_text(const char *value, char *buffer, unsigned int length) {
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buffer, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

static void fill_pci(answer_t *a, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    strncpy(pci->busIdLegacy, next_text(a), sizeof pci->busIdLegacy - 1);
    pci->domain = next_u(a);
    pci->bus = next_u(a);
    pci->device = next_u(a);
    pci->pciDeviceId = next_u(a);
    pci->pciSubSystemId = next_u(a);
    strncpy(pci->busId, next_text(a), sizeof pci->busId - 1);
}

/* ---- initialisation ----------------------------------------------------------------- */
static nvmlReturn_t do_init(const char *symbol) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t code = NVML_SUCCESS;
    if (!init_count) code = load_recording();
    if (!code && init_error) code = init_error;
    if (!code) init_count++;
    pthread_mutex_unlock(&lock);
    log_line("CALL %s -> %d", symbol, code);
    return code;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(__func__); }
nvmlReturn_t nvmlInit(void) { return do_init(__func__); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init(__func__); }

nvmlReturn_t nvmlShutdown(void) {
    log_line("CALL %s", __func__);
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    static char text[32];
    snprintf(text, sizeof text, "stand-in error %d", result);
    return text;
}

/* ---- system ------------------------------------------------------------------------- */
#define SYSTEM_TEXT(symbol)                                                  \
    nvmlReturn_t symbol(char *version, unsigned int length) {                \
        if (!check_out(__func__, version, length)) return NVML_ERROR_INVALID_ARGUMENT; \
        answer_t a;                                                          \
        nvmlReturn_t code = lookup(__func__, #symbol, NULL, "-", &a);        \
        return code ? code : copy_text(next_text(&a), version, length);     \
    }
SYSTEM_TEXT(nvmlSystemGetDriverVersion)
SYSTEM_TEXT(nvmlSystemGetNVMLVersion)

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    OUT(version);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, NULL, "-", &a);
    if (!code) *version = next_i(&a);
    return code;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    OUT(count);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "nvmlDeviceGetCount", NULL, "-", &a);
    if (!code) *count = next_u(&a);
    return code;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    OUT(device);
    log_line("CALL %s index=%u", __func__, index);
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned)gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

/* ---- device: text, scalars, pairs ----------------------------------------------------- */
#define DEVICE_TEXT(symbol)                                                          \
    nvmlReturn_t symbol(nvmlDevice_t device, char *text, unsigned int length) {      \
        if (!check_out(__func__, text, length)) return NVML_ERROR_INVALID_ARGUMENT; \
        answer_t a;                                                                  \
        nvmlReturn_t code = lookup(__func__, #symbol, device, "-", &a);              \
        return code ? code : copy_text(next_text(&a), text, length);                \
    }
DEVICE_TEXT(nvmlDeviceGetName)
DEVICE_TEXT(nvmlDeviceGetSerial)
DEVICE_TEXT(nvmlDeviceGetVbiosVersion)
DEVICE_TEXT(nvmlDeviceGetInforomImageVersion)
DEVICE_TEXT(nvmlDeviceGetBoardPartNumber)

/* f(device, T *out): the first recorded value */
#define DEVICE_SCALAR(symbol, name, type)                                   \
    nvmlReturn_t symbol(nvmlDevice_t device, type *out) {                   \
        OUT(out);                                                           \
        answer_t a;                                                         \
        nvmlReturn_t code = lookup(__func__, name, device, "-", &a);        \
        if (!code) *out = (type)next_i(&a);                                 \
        return code;                                                        \
    }
DEVICE_SCALAR(nvmlDeviceGetComputeMode, "nvmlDeviceGetComputeMode", int)
DEVICE_SCALAR(nvmlDeviceGetPersistenceMode, "nvmlDeviceGetPersistenceMode", int)
DEVICE_SCALAR(nvmlDeviceGetRetiredPagesPendingStatus, "nvmlDeviceGetRetiredPagesPendingStatus", int)
DEVICE_SCALAR(nvmlDeviceGetPerformanceState, "nvmlDeviceGetPerformanceState", int)
DEVICE_SCALAR(nvmlDeviceGetPowerUsage, "nvmlDeviceGetPowerUsage", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetPowerManagementLimit, "nvmlDeviceGetPowerManagementLimit", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetPowerManagementDefaultLimit, "nvmlDeviceGetPowerManagementDefaultLimit", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetEnforcedPowerLimit, "nvmlDeviceGetEnforcedPowerLimit", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetCurrPcieLinkGeneration, "nvmlDeviceGetCurrPcieLinkGeneration", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetGpuMaxPcieLinkGeneration, "nvmlDeviceGetGpuMaxPcieLinkGeneration", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetCurrPcieLinkWidth, "nvmlDeviceGetCurrPcieLinkWidth", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetMaxPcieLinkWidth, "nvmlDeviceGetMaxPcieLinkWidth", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetPcieReplayCounter, "nvmlDeviceGetPcieReplayCounter", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetNumaNodeId, "nvmlDeviceGetNumaNodeId", unsigned int)
DEVICE_SCALAR(nvmlDeviceGetCurrentClocksThrottleReasons, "nvmlDeviceGetCurrentClocksThrottleReasons", unsigned long long)
#ifndef OLD_DRIVER
DEVICE_SCALAR(nvmlDeviceGetCurrentClocksEventReasons, "nvmlDeviceGetCurrentClocksEventReasons", unsigned long long)
#endif

/* f(device, unsigned int arg, T *out): keyed by the argument */
#define DEVICE_SCALAR_ARG(symbol, name, type)                               \
    nvmlReturn_t symbol(nvmlDevice_t device, unsigned int arg, type *out) {  \
        OUT(out);                                                           \
        char key[32];                                                       \
        snprintf(key, sizeof key, "%u", arg);                               \
        answer_t a;                                                         \
        nvmlReturn_t code = lookup(__func__, name, device, key, &a);        \
        if (!code) *out = (type)next_i(&a);                                 \
        return code;                                                        \
    }
DEVICE_SCALAR_ARG(nvmlDeviceGetClockInfo, "nvmlDeviceGetClockInfo", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetMaxClockInfo, "nvmlDeviceGetMaxClockInfo", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetApplicationsClock, "nvmlDeviceGetApplicationsClock", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetDefaultApplicationsClock, "nvmlDeviceGetDefaultApplicationsClock", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetTemperature, "nvmlDeviceGetTemperature", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetTemperatureThreshold, "nvmlDeviceGetTemperatureThreshold", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetNvLinkState, "nvmlDeviceGetNvLinkState", int)
DEVICE_SCALAR_ARG(nvmlDeviceGetNvLinkVersion, "nvmlDeviceGetNvLinkVersion", unsigned int)
DEVICE_SCALAR_ARG(nvmlDeviceGetNvLinkRemoteDeviceType, "nvmlDeviceGetNvLinkRemoteDeviceType", int)

/* f(device, T *first, T *second) */
#define DEVICE_PAIR(symbol, name, type)                                       \
    nvmlReturn_t symbol(nvmlDevice_t device, type *first, type *second) {      \
        OUT(first);                                                           \
        OUT(second);                                                          \
        answer_t a;                                                           \
        nvmlReturn_t code = lookup(__func__, name, device, "-", &a);          \
        if (!code) {                                                          \
            *first = (type)next_i(&a);                                        \
            *second = (type)next_i(&a);                                       \
        }                                                                     \
        return code;                                                          \
    }
DEVICE_PAIR(nvmlDeviceGetMigMode, "nvmlDeviceGetMigMode", unsigned int)
DEVICE_PAIR(nvmlDeviceGetEccMode, "nvmlDeviceGetEccMode", int)
DEVICE_PAIR(nvmlDeviceGetPowerManagementLimitConstraints, "nvmlDeviceGetPowerManagementLimitConstraints", unsigned int)

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    OUT(corrRows);
    OUT(uncRows);
    OUT(isPending);
    OUT(failureOccurred);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) {
        *corrRows = next_u(&a);
        *uncRows = next_u(&a);
        *isPending = next_u(&a);
        *failureOccurred = next_u(&a);
    }
    return code;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *eccCounts) {
    OUT(eccCounts);
    char key[32];
    snprintf(key, sizeof key, "%d,%d", errorType, counterType);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, key, &a);
    if (!code) *eccCounts = next_u(&a);
    return code;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, int errorType, int counterType,
                                             int locationType, unsigned long long *count) {
    OUT(count);
    char key[48];
    snprintf(key, sizeof key, "%d,%d,%d", errorType, counterType, locationType);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, key, &a);
    if (!code) *count = next_u(&a);
    return code;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                             unsigned long long *counterValue) {
    OUT(counterValue);
    char key[48];
    snprintf(key, sizeof key, "%u,%d", link, counter);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, key, &a);
    if (!code) *counterValue = next_u(&a);
    return code;
}

/* ---- device: structures --------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    OUT(pci);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "nvmlDeviceGetPciInfo", device, "-", &a);
    if (!code) fill_pci(&a, pci);
    return code;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    OUT(pci);
    char key[16];
    snprintf(key, sizeof key, "%u", link);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "nvmlDeviceGetNvLinkRemotePciInfo", device, key, &a);
    if (!code) fill_pci(&a, pci);
    return code;
}

static int mig_answer(nvmlDevice_t handle, answer_t *a);

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    OUT(memory);
    answer_t a;
    if (mig_answer(device, &a) == 0) { /* a MIG device: its memory, all free */
        a.next += 3;
        memory->total = next_u(&a);
        memory->free = memory->total;
        memory->used = 0;
        return NVML_SUCCESS;
    }
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) {
        memory->total = next_u(&a);
        memory->free = next_u(&a);
        memory->used = next_u(&a);
    }
    return code;
}

#ifndef OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    OUT(memory);
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "nvmlDeviceGetMemoryInfo", device, "-", &a);
    if (!code) { /* the record is the first structure's (its used includes the reserved
                  * memory), then the reserved memory where recorded */
        memory->total = next_u(&a);
        memory->free = next_u(&a);
        memory->used = next_u(&a);
        memory->reserved = next_u(&a);
        memory->used -= memory->reserved;
    }
    return code;
}
#endif

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1) {
    OUT(bar1);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) {
        bar1->bar1Total = next_u(&a);
        bar1->bar1Free = next_u(&a);
        bar1->bar1Used = next_u(&a);
    }
    return code;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *use) {
    OUT(use);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) {
        use->gpu = next_u(&a);
        use->memory = next_u(&a);
    }
    return code;
}

static void fill_fabric(answer_t *a, unsigned char *uuid, nvmlReturn_t *status,
                        unsigned int *clique, nvmlGpuFabricState_t *state,
                        unsigned int *health) {
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) uuid[i] = (unsigned char)next_u(a);
    *status = (nvmlReturn_t)next_i(a);
    *clique = next_u(a);
    *state = (nvmlGpuFabricState_t)next_u(a);
    unsigned int mask = next_u(a);
    if (health) *health = mask;
}

static int has_record(nvmlDevice_t device, const char *function) {
    int gpu = device_index(device);
    for (int i = 0; i < nrecords; i++)
        if (records[i].gpu == gpu && !strcmp(records[i].function, function)) return 1;
    return 0;
}

/* answers from its own record where the recording has one, else from the V record */
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    OUT(info);
    answer_t a;
    const char *name = has_record(device, __func__) ? __func__ : "nvmlDeviceGetGpuFabricInfoV";
    nvmlReturn_t code = lookup(__func__, name, device, "-", &a);
    if (!code) fill_fabric(&a, info->clusterUuid, &info->status, &info->cliqueId, &info->state, NULL);
    return code;
}

#ifndef OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_v1_t *margin) {
    OUT(margin);
    if (margin->version != nvmlMarginTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) margin->marginTemperature = (int)next_i(&a);
    return code;
}
#endif

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet) {
    if (!check_out(__func__, cpuSet, cpuSetSize * sizeof *cpuSet)) return NVML_ERROR_INVALID_ARGUMENT;
    char key[16];
    snprintf(key, sizeof key, "%u", cpuSetSize);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, key, &a);
    if (!code) {
        for (unsigned int i = 0; i < cpuSetSize; i++) cpuSet[i] = 0;
        for (unsigned int i = 0; i < cpuSetSize && a.next < a.record->nvalues; i++)
            cpuSet[i] = next_u(&a);
    }
    return code;
}

/* f(device, source, unsigned int *count, unsigned long long *addresses): a list */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                       unsigned long long *addresses) {
    OUT(pageCount);
    char key[16];
    snprintf(key, sizeof key, "%d", cause);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, key, &a);
    if (code) return code;
    unsigned int have = (unsigned int)a.record->nvalues;
    unsigned int room = *pageCount;
    *pageCount = have;
    if (room < have) return NVML_ERROR_INSUFFICIENT_SIZE;
    if (have && !check_out(__func__, addresses, have * sizeof *addresses))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < have; i++) addresses[i] = next_u(&a);
    return NVML_SUCCESS;
}

static nvmlReturn_t processes(const char *symbol, const char *name, nvmlDevice_t device,
                              unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    if (!check_out(symbol, infoCount, sizeof *infoCount)) return NVML_ERROR_INVALID_ARGUMENT;
    answer_t a;
    nvmlReturn_t code = lookup(symbol, name, device, "-", &a);
    if (code) return code;
    unsigned int have = (unsigned int)a.record->nvalues / 4;
    unsigned int room = *infoCount;
    *infoCount = have;
    if (room < have || (have && !infos)) return have ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    if (have && !check_out(symbol, infos, have * sizeof *infos)) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < have; i++) {
        infos[i].pid = next_u(&a);
        infos[i].usedGpuMemory = next_u(&a);
        infos[i].gpuInstanceId = next_u(&a);
        infos[i].computeInstanceId = next_u(&a);
    }
    return NVML_SUCCESS;
}

#define PROCESSES(symbol, name)                                                         \
    nvmlReturn_t symbol(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) { \
        return processes(__func__, name, device, count, infos);                         \
    }
PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, "nvmlDeviceGetComputeRunningProcesses")
PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2, "nvmlDeviceGetGraphicsRunningProcesses")
#ifndef OLD_DRIVER
PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, "nvmlDeviceGetComputeRunningProcesses")
PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, "nvmlDeviceGetGraphicsRunningProcesses")
#endif

/* ---- MIG devices: gpudiag's record "gpudiagMigDevices" holds, per MIG device, its slot,
 * UUID, GPU instance, compute instance and memory ----------------------------------- */
#define MIG_SLOTS 8
static struct nvmlDevice_st mig_handles[MAX_GPUS][MIG_SLOTS];

/* The record's values of a MIG handle's device (a->next at its UUID), or -1. */
static int mig_answer(nvmlDevice_t handle, answer_t *a) {
    uintptr_t p = (uintptr_t)handle, base = (uintptr_t)mig_handles;
    if (p < base || p >= base + sizeof mig_handles || (p - base) % sizeof mig_handles[0][0])
        return -1;
    int flat = (int)((p - base) / sizeof mig_handles[0][0]);
    int gpu = flat / MIG_SLOTS, slot = flat % MIG_SLOTS;
    if (lookup("mig", "gpudiagMigDevices", &devices[gpu], "-", a)) return -1;
    for (int i = 0; i + 4 < a->record->nvalues; i += 5)
        if (atoi(a->record->values[i]) == slot) {
            a->next = i + 1;
            return 0;
        }
    return -1;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    OUT(count);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "gpudiagMigDevices", device, "-", &a);
    if (!code) *count = MIG_SLOTS;
    return code;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    OUT(migDevice);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "gpudiagMigDevices", device, "-", &a);
    if (code) return code;
    if (index >= MIG_SLOTS) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i + 4 < a.record->nvalues; i += 5)
        if ((unsigned)atoi(a.record->values[i]) == index) {
            *migDevice = &mig_handles[device_index(device)][index];
            return NVML_SUCCESS;
        }
    log_line("SLOT %s gpu=%d index=%u -> 6 (unused)", __func__, device_index(device), index);
    return 6; /* NVML_ERROR_NOT_FOUND: an unused slot */
}

#define MIG_ID(symbol, skip)                                                  \
    nvmlReturn_t symbol(nvmlDevice_t device, unsigned int *id) {              \
        OUT(id);                                                              \
        answer_t a;                                                           \
        if (mig_answer(device, &a)) return NVML_ERROR_INVALID_ARGUMENT;       \
        a.next += skip;                                                       \
        *id = next_u(&a);                                                     \
        return NVML_SUCCESS;                                                  \
    }
MIG_ID(nvmlDeviceGetGpuInstanceId, 1)
MIG_ID(nvmlDeviceGetComputeInstanceId, 2)

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *text, unsigned int length) {
    if (!check_out(__func__, text, length)) return NVML_ERROR_INVALID_ARGUMENT;
    answer_t a;
    if (mig_answer(device, &a) == 0) return copy_text(next_text(&a), text, length);
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    return code ? code : copy_text(next_text(&a), text, length);
}

/* ---- device pairs --------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 int *pathInfo) {
    OUT(pathInfo);
    int peer = device_index(device2);
    if (peer < 0) return NVML_ERROR_INVALID_ARGUMENT;
    char key[16];
    snprintf(key, sizeof key, "%d", peer);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device1, key, &a);
    if (!code) *pathInfo = (int)next_i(&a);
    return code;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, int p2pIndex,
                                    int *p2pStatus) {
    OUT(p2pStatus);
    int peer = device_index(device2);
    if (peer < 0) return NVML_ERROR_INVALID_ARGUMENT;
    char key[32];
    snprintf(key, sizeof key, "%d,%d", peer, p2pIndex);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device1, key, &a);
    if (!code) *p2pStatus = (int)next_i(&a);
    return code;
}

/* ---- field values --------------------------------------------------------------------- */
/* nvml.h (NVML API 13, NVIDIA/go-nvml gen/nvml/nvml.h at 2f9e261): the GPU recovery action
 * field, "None/Reset/Reboot/Drain P2P/Drain and Reset", an unsigned int of
 * nvmlDeviceGpuRecoveryAction_t; 6 and 7 as nvidia-ml-py 13.615.71 names them. A recorded
 * value of another type or out of the enum is a broken recording: logged BADRECORD and
 * answered NVML_ERROR_UNKNOWN, never passed on. */
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
typedef enum {
    NVML_GPU_RECOVERY_ACTION_NONE = 0,
    NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1,
    NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2,
    NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3,
    NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4,
    NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN = 5,
    NVML_GPU_RECOVERY_ACTION_BUS_RESET = 6,
    NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT = 7,
} gpudiagGpuRecoveryAction_t;

static void check_recovery_action(int gpu, nvmlFieldValue_t *v) {
    if (v->fieldId != NVML_FI_DEV_GET_GPU_RECOVERY_ACTION || v->nvmlReturn) return;
    if (v->valueType != NVML_VALUE_TYPE_UNSIGNED_INT
        || v->value.uiVal > NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT) {
        log_line("BADRECORD gpu=%d NVML_FI_DEV_GET_GPU_RECOVERY_ACTION type=%d", gpu,
                 (int)v->valueType);
        v->nvmlReturn = NVML_ERROR_UNKNOWN;
        return;
    }
    log_line("CALL nvmlDeviceGetFieldValues gpu=%d NVML_FI_DEV_GET_GPU_RECOVERY_ACTION -> %u",
             gpu, v->value.uiVal);
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values) {
    if (valuesCount <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (!check_out(__func__, values, valuesCount * sizeof *values)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    int gpu = device_index(device);
    if (gpu < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (lost[gpu]) return lost[gpu];
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        char key[32];
        snprintf(key, sizeof key, "%u,%u", v->fieldId, v->scopeId);
        answer_t field;
        v->nvmlReturn = lookup(__func__, "nvmlDeviceGetFieldValues", device, key, &field);
        v->timestamp = 0;
        v->latencyUsec = 0;
        if (v->nvmlReturn) continue;
        v->valueType = (nvmlValueType_t)next_u(&field);
        switch (v->valueType) {
        case NVML_VALUE_TYPE_DOUBLE: v->value.dVal = strtod(next_text(&field), NULL); break;
        case NVML_VALUE_TYPE_UNSIGNED_INT: v->value.uiVal = next_u(&field); break;
        case NVML_VALUE_TYPE_SIGNED_INT: v->value.siVal = (int)next_i(&field); break;
        case NVML_VALUE_TYPE_SIGNED_LONG_LONG: v->value.sllVal = next_i(&field); break;
        default: v->value.ullVal = next_u(&field); break;
        }
        check_recovery_action(gpu, v);
    }
    return NVML_SUCCESS;
}

/* ---- PCIe throughput (the older counter, for GPUs without GPM) ----------------------- */
DEVICE_SCALAR_ARG(nvmlDeviceGetPcieThroughput, "nvmlDeviceGetPcieThroughput", unsigned int)

/* ---- GPM: GPU Performance Monitoring (nvml.h, Hopper and newer) ----------------------
 * A scripted counter trace: each nvmlGpmSampleGet of a GPU answers its next record of
 * "nvmlGpmSampleGet" (nvmlGpmMigSampleGet: "nvmlGpmMigSampleGet" keyed by the GPU instance
 * id), whose values are <metricId>:<value> pairs, the metrics of the window that ends at
 * this sample; a record with a failing code fails that sample only (a GPU lost for one
 * window: 15; counters another profiler holds: 19, NVML_ERROR_IN_USE). nvmlGpmMetricsGet
 * answers each metric asked from sample2's record; a metric the record lacks reads
 * NVML_ERROR_NOT_SUPPORTED in its own nvmlReturn, never 0. Samples are checked: allocated
 * here, not freed, taken, of one GPU, sample2 taken after sample1. */
#define NVML_GPM_METRIC_MAX 477 /* nvml.h 13.x; the 12.x header's is 98 (a prefix of it) */
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

#define GPM_MAGIC 0x47504d53u
struct nvmlGpmSample_st {
    unsigned int magic;
    int gpu;
    unsigned long long taken; /* 0: never taken; else the order it was taken in */
    record_t *record;
};
static unsigned long long gpm_taken;

static int gpm_sample_ok(const char *function, nvmlGpmSample_t sample) {
    if (!sample || !check_out(function, sample, sizeof *sample) || sample->magic != GPM_MAGIC) {
        log_line("BADSAMPLE %s: %p is not a sample nvmlGpmSampleAlloc gave", function,
                 (void *)sample);
        return 0;
    }
    return 1;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    OUT(support);
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) support->isSupportedDevice = next_u(&a);
    return code;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    OUT(sample);
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
    s->magic = GPM_MAGIC;
    s->gpu = -1;
    *sample = s;
    log_line("CALL %s -> 0", __func__);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!gpm_sample_ok(__func__, sample)) return NVML_ERROR_INVALID_ARGUMENT;
    sample->magic = 0;
    free(sample);
    log_line("CALL %s -> 0", __func__);
    return NVML_SUCCESS;
}

static nvmlReturn_t gpm_take(const char *symbol, nvmlDevice_t device, const char *argkey,
                             nvmlGpmSample_t sample) {
    if (!gpm_sample_ok(symbol, sample)) return NVML_ERROR_INVALID_ARGUMENT;
    answer_t a;
    nvmlReturn_t code = lookup(symbol, symbol, device, argkey, &a);
    if (code) return code;
    pthread_mutex_lock(&lock);
    sample->taken = ++gpm_taken;
    pthread_mutex_unlock(&lock);
    sample->gpu = device_index(device);
    sample->record = a.record;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    return gpm_take(__func__, device, "-", sample);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t sample) {
    char key[16];
    snprintf(key, sizeof key, "%u", gpuInstanceId);
    return gpm_take(__func__, device, key, sample);
}

static char gpm_short[] = "standin", gpm_long[] = "a scripted GPM metric", gpm_unit[] = "-";

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    size_t header = offsetof(nvmlGpmMetricsGet_t, metrics);
    if (!check_out(__func__, metricsGet, header)) return NVML_ERROR_INVALID_ARGUMENT;
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) {
        log_line("CALL %s version=%u -> ArgumentVersionMismatch", __func__, metricsGet->version);
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    unsigned int n = metricsGet->numMetrics;
    if (n == 0 || n > NVML_GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    if (!check_out(__func__, metricsGet, header + n * sizeof(nvmlGpmMetric_t)))
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t s1 = metricsGet->sample1, s2 = metricsGet->sample2;
    if (!gpm_sample_ok(__func__, s1) || !gpm_sample_ok(__func__, s2))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!s1->taken || !s2->taken || s1->gpu != s2->gpu || s2->taken <= s1->taken) {
        log_line("CALL %s samples gpu=%d/%d taken=%llu/%llu -> 2", __func__, s1->gpu, s2->gpu,
                 s1->taken, s2->taken);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    record_t *r = s2->record;
    for (unsigned int i = 0; i < n; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        m->value = 0;
        m->metricInfo.shortName = gpm_short;
        m->metricInfo.longName = gpm_long;
        m->metricInfo.unit = gpm_unit;
        for (int k = 0; r && k < r->nvalues; k++) {
            char *colon = strchr(r->values[k], ':');
            if (colon && strtoul(r->values[k], NULL, 10) == m->metricId) {
                m->value = strtod(colon + 1, NULL);
                m->nvmlReturn = NVML_SUCCESS;
                break;
            }
        }
    }
    log_line("CALL %s gpu=%d metrics=%u -> 0", __func__, s2->gpu, n);
    return NVML_SUCCESS;
}

#include "fabric.c" /* the fabric info and C2C calls (v2, v3, v4 structures) */
