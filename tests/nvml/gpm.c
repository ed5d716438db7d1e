/* GPU performance monitoring (GPM, Hopper and later) and MIG device handles for the tests'
 * libnvidia-ml.so.1, with NVML's signatures and structures. Included at the end of
 * fakenvml.c (one translation unit: it uses enter(), gpu_number() and the devices array).
 *
 * State keys (tests/nvml/gpm.py writes them):
 *   gpu.<i>.gpm.supported         1: nvmlGpmQueryDeviceSupport says so; absent or 0: a GPU
 *                                 before Hopper (the query succeeds, isSupportedDevice 0,
 *                                 and every sample of it is NOT_SUPPORTED)
 *   gpu.<i>.gpm.<metric id>       the metric over a pair of samples, in thousandths of its
 *                                 unit (37500: 37.5 %), as the state held it when the later
 *                                 sample was taken; absent: that metric is NOT_SUPPORTED
 *   gpu.<i>.gpm_mig.<gi>.<id>     the same per MIG GPU instance (nvmlGpmMigSampleGet)
 *   gpu.<i>.mig_max               nvmlDeviceGetMaxMigDeviceCount (absent: 0)
 *   gpu.<i>.mig.<slot>            the device index k of that MIG device: its handle answers
 *                                 from gpu.<k>.* (uuid, memory_total, gpu_instance_id)
 */

#define GPM_METRICS_GET_VERSION 1
#define GPM_SUPPORT_VERSION 1
#define GPM_METRIC_MAX 98 /* nvml.h of driver R550: numMetrics above it is refused */
#define GPM_TRACKED 16    /* metrics one sample remembers (the agent asks for 4) */
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

/* What one sample holds: the GPU (and GPU instance) it was taken on, when, and a copy of
 * the state's values of the GPM_TRACKED metrics at that time. */
struct nvmlGpmSample_st {
    unsigned magic;
    int gpu;          /* -1: allocated, never filled */
    int gpu_instance; /* -1: the whole GPU */
    long long taken_ns;
    unsigned ids[GPM_TRACKED];
    long long values[GPM_TRACKED];
    int present[GPM_TRACKED];
    int count;
};
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;
#define GPM_MAGIC 0x67706d31u

typedef struct {
    char *shortName;
    char *longName;
    char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned version;
    unsigned numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned version;
    unsigned isSupportedDevice;
} nvmlGpmSupport_t;

/* The ids a sample copies from the state: the ones a test may set (nvml.h's NVML_GPM_METRIC_*). */
static const unsigned gpm_ids[GPM_TRACKED] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21, 60};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int gpm_supported(int gpu) {
    long long v = 0;
    return gpu_number((unsigned)gpu, "gpm.supported", &v) && v;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    DEVICE_ENTER("nvmlGpmQueryDeviceSupport", device)
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = (unsigned)gpm_supported(gpu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    nvmlReturn_t r = enter("nvmlGpmSampleAlloc", -1);
    if (r) return r;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    if (!*sample) return NVML_ERROR_UNKNOWN;
    (*sample)->magic = GPM_MAGIC;
    (*sample)->gpu = -1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!sample || sample->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    sample->magic = 0;
    free(sample);
    return NVML_SUCCESS;
}

/* Fill `sample` from gpu.<gpu>.<prefix><id> keys. */
static void take(nvmlGpmSample_t sample, int gpu, int gpu_instance, const char *prefix) {
    sample->gpu = gpu;
    sample->gpu_instance = gpu_instance;
    sample->taken_ns = now_ns();
    sample->count = GPM_TRACKED;
    for (int i = 0; i < GPM_TRACKED; i++) {
        char field[NAME_LEN];
        snprintf(field, sizeof field, "%s%u", prefix, gpm_ids[i]);
        sample->ids[i] = gpm_ids[i];
        sample->present[i] = gpu_number((unsigned)gpu, field, &sample->values[i]);
    }
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    DEVICE_ENTER("nvmlGpmSampleGet", device)
    if (!sample || sample->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpm_supported(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    take(sample, gpu, -1, "gpm.");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned gpuInstanceId, nvmlGpmSample_t sample) {
    DEVICE_ENTER("nvmlGpmMigSampleGet", device)
    long long mig = 0;
    char prefix[NAME_LEN], field[NAME_LEN];
    if (!sample || sample->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpm_supported(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    if (!gpu_number((unsigned)gpu, "mig_current", &mig) || !mig) return NVML_ERROR_NOT_SUPPORTED;
    snprintf(prefix, sizeof prefix, "gpm_mig.%u.", gpuInstanceId);
    snprintf(field, sizeof field, "gpm_mig.%u.%u", gpuInstanceId, gpm_ids[1]);
    long long any;
    if (!gpu_number((unsigned)gpu, field, &any)) return NVML_ERROR_INVALID_ARGUMENT; /* no such GPU instance */
    take(sample, gpu, (int)gpuInstanceId, prefix);
    return NVML_SUCCESS;
}

static const char *gpm_name(unsigned id) {
    switch (id) {
    case 1: return "GRAPHICS_UTIL";
    case 2: return "SM_UTIL";
    case 3: return "SM_OCCUPANCY";
    case 5: return "ANY_TENSOR_UTIL";
    case 10: return "DRAM_BW_UTIL";
    default: return "OTHER";
    }
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    nvmlReturn_t r = enter("nvmlGpmMetricsGet", -1);
    if (r) return r;
    if (!get) return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t first = get->sample1, second = get->sample2;
    if (!first || !second || first->magic != GPM_MAGIC || second->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (first->gpu < 0 || second->gpu < 0 || first->gpu != second->gpu || first->gpu_instance != second->gpu_instance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (second->taken_ns <= first->taken_ns) return NVML_ERROR_INVALID_ARGUMENT; /* sample2 is the later one */
    if (get->numMetrics > GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned m = 0; m < get->numMetrics; m++) {
        nvmlGpmMetric_t *metric = &get->metrics[m];
        metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        metric->value = 0.0;
        metric->metricInfo.shortName = (char *)gpm_name(metric->metricId);
        metric->metricInfo.longName = (char *)gpm_name(metric->metricId);
        metric->metricInfo.unit = metric->metricId >= 20 ? "MiB/sec" : "%";
        for (int i = 0; i < second->count; i++)
            if (second->ids[i] == metric->metricId && second->present[i]) {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = (double)second->values[i] / 1000.0;
            }
    }
    return NVML_SUCCESS;
}

/* ---- MIG devices: handles into the devices array past the GPUs the count gives out */

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned *count) {
    DEVICE_ENTER("nvmlDeviceGetMaxMigDeviceCount", device)
    long long max = 0;
    gpu_number((unsigned)gpu, "mig_max", &max);
    *count = max < 0 ? 0 : (unsigned)max;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned slot, nvmlDevice_t *mig) {
    DEVICE_ENTER("nvmlDeviceGetMigDeviceHandleByIndex", device)
    char field[NAME_LEN];
    long long k;
    snprintf(field, sizeof field, "mig.%u", slot);
    if (!gpu_number((unsigned)gpu, field, &k)) return NVML_ERROR_NOT_FOUND;
    if (k < 0 || k >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    *mig = &devices[k];
    return NVML_SUCCESS;
}

UINT_FIELD(nvmlDeviceGetGpuInstanceId, "gpu_instance_id")
