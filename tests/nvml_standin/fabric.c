/* Part of the stand-in libnvidia-ml.so.1 (included at the end of libnvidia_ml.c, whose
 * helpers it uses): the fabric info calls and the C2C mode. */
/* ---- fabric info: nvmlGpuFabricInfo_v2/v3 (versioned) and _v4 ------------------------
 * nvmlDeviceGetGpuFabricInfoV takes v3 (40 bytes, with healthSummary) or v2 (36 bytes),
 * told by the version field (NVML_STRUCT_VERSION: size | version << 24); a GPU recorded
 * with gpudiagFabricV2Only stands for an R535-R565 driver and refuses v3 with
 * ARGUMENT_VERSION_MISMATCH. Record: clusterUuid[16] status cliqueId state healthMask
 * [healthSummary].
 * nvmlDeviceGetGpuFabricInfo_v4 (nvmlGpuFabricInfo_v4_t, 548 bytes, no version field):
 * record clusterUuid[16] status state healthMask healthSummary numCliques (type id)...;
 * a GPU without that record answers FUNCTION_NOT_FOUND, as a driver without it.
 */
#ifndef OLD_DRIVER
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_GPU_FABRIC_CLIQUE_MAX 64
typedef struct {
    unsigned char type;
    unsigned int id;
} nvmlGpuFabricClique_v1_t;

typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    nvmlGpuFabricClique_v1_t cliques[NVML_GPU_FABRIC_CLIQUE_MAX];
    unsigned int numCliques;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v4_t;

_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "nvmlGpuFabricInfo_v3_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v4_t) == 548, "nvmlGpuFabricInfo_v4_t");

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v3_t *info) {
    if (!check_out(__func__, info, sizeof info->version)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = info->version;
    size_t size = version == nvmlGpuFabricInfo_v3 ? sizeof(nvmlGpuFabricInfo_v3_t)
                  : version == nvmlGpuFabricInfo_v2 ? sizeof(nvmlGpuFabricInfo_v2_t) : 0;
    if (size == sizeof(nvmlGpuFabricInfo_v3_t) && has_record(device, "gpudiagFabricV2Only"))
        size = 0;
    if (!size) {
        log_line("CALL %s version=0x%x -> ArgumentVersionMismatch", __func__, version);
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (!check_out(__func__, info, size)) return NVML_ERROR_INVALID_ARGUMENT;
    answer_t a;
    nvmlReturn_t code = lookup(__func__, "nvmlDeviceGetGpuFabricInfoV", device, "-", &a);
    if (!code) {
        fill_fabric(&a, info->clusterUuid, &info->status, &info->cliqueId, &info->state,
                    &info->healthMask);
        if (size == sizeof(nvmlGpuFabricInfo_v3_t)) info->healthSummary = (unsigned char)next_u(&a);
    }
    return code;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo_v4(nvmlDevice_t device, nvmlGpuFabricInfo_v4_t *info) {
    OUT(info);
    if (device_index(device) >= 0 && !has_record(device, __func__)) {
        log_line("CALL %s gpu=%d -> FunctionNotFound (not recorded)", __func__, device_index(device));
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (code) return code;
    memset(info, 0, sizeof *info);
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) info->clusterUuid[i] = (unsigned char)next_u(&a);
    info->status = (nvmlReturn_t)next_i(&a);
    info->state = (nvmlGpuFabricState_t)next_u(&a);
    info->healthMask = (unsigned int)next_u(&a);
    info->healthSummary = (unsigned char)next_u(&a);
    unsigned int count = (unsigned int)next_u(&a);
    if (count > NVML_GPU_FABRIC_CLIQUE_MAX) count = NVML_GPU_FABRIC_CLIQUE_MAX;
    info->numCliques = count;
    for (unsigned int i = 0; i < count; i++) {
        info->cliques[i].type = (unsigned char)next_u(&a);
        info->cliques[i].id = (unsigned int)next_u(&a);
    }
    return code;
}

/* nvmlC2cModeInfo_v1_t (no version field); a GPU without the record has no C2C */
typedef struct {
    unsigned int isC2cEnabled;
} nvmlC2cModeInfo_v1_t;

nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *info) {
    OUT(info);
    answer_t a;
    nvmlReturn_t code = lookup(__func__, __func__, device, "-", &a);
    if (!code) info->isC2cEnabled = (unsigned int)next_u(&a);
    return code;
}
#endif
/* ---- end of fabric info --------------------------------------------------------------- */
