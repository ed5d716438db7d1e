/* libnvidia-ml.so.1 for tests: the part of NVML's C API the agent calls, with its real
 * signatures, answering from a state file that a test rewrites while the agent runs.
 *
 * The state file (path in FADEN_FAKE_NVML_STATE) is ONE flat JSON object whose values are
 * integers or strings, e.g. {"count": 1, "gpu.0.uuid": "GPU-a", "gpu.0.remap.pending": 1}.
 * Anything else (nesting, floats, true/false, a duplicate key, trailing bytes) is refused:
 * every call then returns NVML_ERROR_UNKNOWN and the reason goes to stderr. The file is
 * checked on every call (stat) and parsed again when it changed; tests replace it with a
 * rename. Keys (tests/nvml/state.py writes them):
 *   init_error, count, driver_version, cuda_version, nvml_version, event_wait_error,
 *   hang_ms.<function> (every call of it sleeps), error.<function> (returns that code),
 *   events, event.<n>.gpu / .type / .data (an append-only list of NVML events),
 *   gpu.<i>.<field>: see the functions below; gpu.<i>.lost: every call on it is GPU_IS_LOST;
 *   gpu.<i>.hang_ms.<function>, gpu.<i>.error.<function>; gpu.<i>.fail_all: every call on that
 *   GPU (getting its handle too) returns that code, as a GPU fallen off the bus answers
 *   NVML_ERROR_UNKNOWN (999). An absent field: NOT_SUPPORTED.
 *   GPM and MIG devices: gpm.c (included at the end).
 *   A lost GPU registered in an event set ends that set's waits with GPU_IS_LOST.
 * The file is stat'ed once per call (a real driver's ioctl), not once per key read.
 * NVML's clients: while a process has NVML initialised (nvmlInit attaches every GPU, so it
 * holds them all, as a real client does) the file <state>.clients/<pid> exists; the stand-in
 * nvidia-smi refuses a reset while a live client holds the GPUs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_LINKS 64 /* totals sum at most this many links, whatever the state says */
#define MAX_KEYS 16384
#define MAX_FILE (4 * 1024 * 1024)
#define NAME_LEN 128

struct nvmlDevice_st {
    unsigned index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;
static struct nvmlDevice_st devices[MAX_GPUS];

/* ---- the state: a hash table of key -> integer or string */

struct entry {
    char *key;
    char *text; /* NULL: a number */
    long long number;
};

struct table {
    struct entry *slots; /* MAX_KEYS * 2, open addressing */
    char *arena;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct table current;
static int loaded_ok;
static struct stat loaded_stat;
static int initialized;
static int complained;

static uint64_t hash_of(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static struct entry *slot_for(struct table *t, const char *key) {
    size_t n = MAX_KEYS * 2;
    for (size_t i = hash_of(key) % n;; i = (i + 1) % n) {
        if (!t->slots[i].key || strcmp(t->slots[i].key, key) == 0) return &t->slots[i];
    }
}

static void table_free(struct table *t) {
    free(t->slots);
    free(t->arena);
    t->slots = NULL;
    t->arena = NULL;
}

/* A strict reader of one flat object. Strings are copied into `arena` in place of the
 * file's bytes (an unescaped string is never longer than its quoted form). */
struct parser {
    char *p, *end, *out;
    const char *error;
};

static void skip_space(struct parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\t' || *ps->p == '\r')) ps->p++;
}

static char *read_string(struct parser *ps) {
    if (ps->p >= ps->end || *ps->p != '"') return ps->error = "expected a string", NULL;
    ps->p++;
    char *start = ps->out;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) return ps->error = "control character in a string", NULL;
        if (c == '\\') {
            if (ps->p >= ps->end) break;
            c = (unsigned char)*ps->p++;
            if (c != '"' && c != '\\' && c != '/') return ps->error = "unsupported escape", NULL;
        }
        *ps->out++ = (char)c;
    }
    if (ps->p >= ps->end) return ps->error = "unterminated string", NULL;
    ps->p++;
    *ps->out++ = '\0';
    return start;
}

static int read_number(struct parser *ps, long long *value) {
    char *start = ps->p;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return ps->error = "expected an integer or a string", 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E')) return ps->error = "not an integer", 0;
    char digits[32];
    if (ps->p - start >= (long)sizeof digits) return ps->error = "integer too long", 0;
    memcpy(digits, start, (size_t)(ps->p - start));
    digits[ps->p - start] = '\0';
    errno = 0;
    *value = strtoll(digits, NULL, 10);
    if (errno) return ps->error = "integer out of range", 0;
    return 1;
}

static const char *parse(char *text, size_t size, struct table *t) {
    struct parser ps = {text, text + size, NULL, NULL};
    t->arena = malloc(size + 1);
    t->slots = calloc(MAX_KEYS * 2, sizeof(struct entry));
    if (!t->arena || !t->slots) return "out of memory";
    ps.out = t->arena;
    size_t keys = 0;
    skip_space(&ps);
    if (ps.p >= ps.end || *ps.p++ != '{') return "expected {";
    skip_space(&ps);
    if (ps.p < ps.end && *ps.p == '}') {
        ps.p++;
    } else {
        for (;;) {
            skip_space(&ps);
            char *key = read_string(&ps);
            if (!key) return ps.error;
            skip_space(&ps);
            if (ps.p >= ps.end || *ps.p++ != ':') return "expected :";
            skip_space(&ps);
            struct entry value = {key, NULL, 0};
            if (ps.p < ps.end && *ps.p == '"') {
                if (!(value.text = read_string(&ps))) return ps.error;
            } else if (!read_number(&ps, &value.number)) {
                return ps.error;
            }
            if (++keys > MAX_KEYS) return "too many keys";
            struct entry *slot = slot_for(t, key);
            if (slot->key) return "duplicate key";
            *slot = value;
            skip_space(&ps);
            if (ps.p < ps.end && *ps.p == ',') {
                ps.p++;
                continue;
            }
            if (ps.p < ps.end && *ps.p == '}') {
                ps.p++;
                break;
            }
            return "expected , or }";
        }
    }
    skip_space(&ps);
    return ps.p == ps.end ? NULL : "trailing bytes after the object";
}

/* Under `lock`: the table is current (re-read when the file changed). 0 when unusable. */
static int refresh(void) {
    const char *path = getenv("FADEN_FAKE_NVML_STATE");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        if (loaded_ok || !complained++) fprintf(stderr, "fakenvml: no state file (FADEN_FAKE_NVML_STATE=%s)\n", path ? path : "");
        return loaded_ok = 0;
    }
    if (loaded_ok && st.st_ino == loaded_stat.st_ino && st.st_size == loaded_stat.st_size &&
        st.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec && st.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
        return 1;
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
        fprintf(stderr, "fakenvml: %s: not a regular file of at most %d bytes\n", path, MAX_FILE);
        return loaded_ok = 0;
    }
    FILE *fh = fopen(path, "rb");
    char *text = fh ? malloc((size_t)st.st_size + 1) : NULL;
    size_t size = text ? fread(text, 1, (size_t)st.st_size, fh) : 0;
    if (fh) fclose(fh);
    if (!text || size != (size_t)st.st_size) {
        free(text);
        fprintf(stderr, "fakenvml: %s: cannot read\n", path);
        return loaded_ok = 0;
    }
    struct table fresh = {NULL, NULL};
    const char *error = parse(text, size, &fresh);
    free(text);
    if (error) {
        table_free(&fresh);
        fprintf(stderr, "fakenvml: %s: %s\n", path, error);
        return loaded_ok = 0;
    }
    table_free(&current);
    current = fresh;
    loaded_stat = st;
    return loaded_ok = 1;
}

static struct entry *find(const char *key) {
    if (!loaded_ok) return NULL;
    struct entry *e = slot_for(&current, key);
    return e->key ? e : NULL;
}

/* Re-reads the state file when it changed: once per entry point (see enter). */
static int reload(void) {
    pthread_mutex_lock(&lock);
    int ok = refresh();
    pthread_mutex_unlock(&lock);
    return ok;
}

/* number(key): 1 and *out when the key holds an integer (in the state as last loaded). */
static int number(const char *key, long long *out) {
    pthread_mutex_lock(&lock);
    struct entry *e = find(key);
    int found = e && !e->text;
    if (found) *out = e->number;
    pthread_mutex_unlock(&lock);
    return found;
}

static int gpu_number(unsigned gpu, const char *field, long long *out) {
    char key[NAME_LEN + 32];
    snprintf(key, sizeof key, "gpu.%u.%s", gpu, field);
    return number(key, out);
}

static nvmlReturn_t copy_text(const char *key, char *buffer, unsigned length) {
    nvmlReturn_t ret = NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    struct entry *e = find(key);
    if (e && e->text) {
        ret = strlen(e->text) < length ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
        if (ret == NVML_SUCCESS) strcpy(buffer, e->text);
    }
    pthread_mutex_unlock(&lock);
    return ret;
}

static void sleep_ms(long long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Every entry point starts here: the state file is good, NVML is initialised, then the
 * test's hang and error for this function (and GPU, when gpu >= 0). */
static nvmlReturn_t enter(const char *function, int gpu) {
    if (!reload()) return NVML_ERROR_UNKNOWN;
    char key[NAME_LEN];
    long long value;
    snprintf(key, sizeof key, "hang_ms.%s", function);
    if (number(key, &value)) sleep_ms(value);
    if (gpu >= 0) {
        snprintf(key, sizeof key, "gpu.%d.hang_ms.%s", gpu, function);
        if (number(key, &value)) sleep_ms(value);
    }
    if (!__atomic_load_n(&initialized, __ATOMIC_SEQ_CST)) return NVML_ERROR_UNINITIALIZED;
    snprintf(key, sizeof key, "error.%s", function);
    if (number(key, &value)) return (nvmlReturn_t)value;
    if (gpu >= 0) {
        if (gpu_number((unsigned)gpu, "lost", &value) && value) return NVML_ERROR_GPU_IS_LOST;
        if (gpu_number((unsigned)gpu, "fail_all", &value) && value) return (nvmlReturn_t)value;
        snprintf(key, sizeof key, "gpu.%d.error.%s", gpu, function);
        if (number(key, &value)) return (nvmlReturn_t)value;
    }
    return NVML_SUCCESS;
}

static int gpu_count(void) {
    long long count = 0;
    number("count", &count);
    return count < 0 ? 0 : count > MAX_GPUS ? MAX_GPUS : (int)count;
}

/* The GPU index of a handle, or -1 for a handle this library did not give out. */
static int index_of(nvmlDevice_t device) {
    if (device < devices || device >= devices + MAX_GPUS) return -1;
    return (int)(device - devices);
}

#define DEVICE_ENTER(name, device)                          \
    int gpu = index_of(device);                             \
    if (gpu < 0) return NVML_ERROR_INVALID_ARGUMENT;        \
    nvmlReturn_t entered = enter(name, gpu);                \
    if (entered != NVML_SUCCESS) return entered;

/* A function answering one field of a GPU as `type`. */
#define ONE_FIELD(function, type, field)                                            \
    nvmlReturn_t function(nvmlDevice_t device, type *out) {                         \
        DEVICE_ENTER(#function, device)                                             \
        long long v;                                                                \
        if (!out) return NVML_ERROR_INVALID_ARGUMENT;                               \
        if (!gpu_number((unsigned)gpu, field, &v)) return NVML_ERROR_NOT_SUPPORTED; \
        *out = (type)v;                                                             \
        return NVML_SUCCESS;                                                        \
    }
#define UINT_FIELD(function, field) ONE_FIELD(function, unsigned, field)

/* ---- library and system */

static pthread_mutex_t client_lock = PTHREAD_MUTEX_INITIALIZER;

/* <state>.clients/<pid>: this process holds NVML (and so every GPU) while the file exists. */
static void mark_client(int holding) {
    const char *state = getenv("FADEN_FAKE_NVML_STATE");
    char path[4096];
    if (!state || snprintf(path, sizeof path, "%s.clients", state) >= (int)sizeof path - 16) return;
    mkdir(path, 0755);
    size_t end = strlen(path);
    snprintf(path + end, sizeof path - end, "/%ld", (long)getpid());
    if (holding) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
    } else {
        unlink(path);
    }
}

nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    if (!reload()) return NVML_ERROR_UNKNOWN;
    long long value;
    if (number("hang_ms.nvmlInitWithFlags", &value)) sleep_ms(value);
    if (number("init_error", &value)) return (nvmlReturn_t)value;
    for (unsigned i = 0; i < MAX_GPUS; i++) devices[i].index = i;
    pthread_mutex_lock(&client_lock);
    if (__atomic_add_fetch(&initialized, 1, __ATOMIC_SEQ_CST) == 1) mark_client(1);
    pthread_mutex_unlock(&client_lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&client_lock);
    nvmlReturn_t r = NVML_ERROR_UNINITIALIZED;
    if (__atomic_load_n(&initialized, __ATOMIC_SEQ_CST) > 0) {
        if (__atomic_sub_fetch(&initialized, 1, __ATOMIC_SEQ_CST) == 0) mark_client(0);
        r = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&client_lock);
    return r;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length) {
    nvmlReturn_t r = enter("nvmlSystemGetDriverVersion", -1);
    return r ? r : copy_text("driver_version", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned length) {
    nvmlReturn_t r = enter("nvmlSystemGetNVMLVersion", -1);
    return r ? r : copy_text("nvml_version", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    nvmlReturn_t r = enter("nvmlSystemGetCudaDriverVersion", -1);
    long long v;
    if (r) return r;
    if (!number("cuda_version", &v)) return NVML_ERROR_NOT_SUPPORTED;
    *version = (int)v;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    nvmlReturn_t r = enter("nvmlDeviceGetCount_v2", -1);
    if (r) return r;
    *count = (unsigned)gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (index >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = enter("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (r) return r;
    if ((int)index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

/* ---- identity and usage */

static nvmlReturn_t gpu_text(nvmlDevice_t device, const char *function, const char *field, char *buffer,
                             unsigned length) {
    DEVICE_ENTER(function, device)
    char key[NAME_LEN];
    snprintf(key, sizeof key, "gpu.%d.%s", gpu, field);
    return copy_text(key, buffer, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length) {
    return gpu_text(device, "nvmlDeviceGetUUID", "uuid", uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length) {
    return gpu_text(device, "nvmlDeviceGetName", "name", name, length);
}

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    return gpu_text(device, "nvmlDeviceGetPciInfo_v3", "bus_id", pci->busId, sizeof pci->busId);
}

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE_ENTER("nvmlDeviceGetMemoryInfo", device)
    long long total, used = 0;
    if (!gpu_number((unsigned)gpu, "memory_total", &total)) return NVML_ERROR_NOT_SUPPORTED;
    gpu_number((unsigned)gpu, "memory_used", &used);
    memory->total = (unsigned long long)total;
    memory->used = (unsigned long long)used;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

/* Two fields a function answers together: both there, or NOT_SUPPORTED. */
static int both(int gpu, const char *first, const char *second, long long *a, long long *b) {
    return gpu_number((unsigned)gpu, first, a) && gpu_number((unsigned)gpu, second, b);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEVICE_ENTER("nvmlDeviceGetCudaComputeCapability", device)
    long long a, b;
    if (!both(gpu, "cc_major", "cc_minor", &a, &b)) return NVML_ERROR_NOT_SUPPORTED;
    *major = (int)a, *minor = (int)b;
    return NVML_SUCCESS;
}

UINT_FIELD(nvmlDeviceGetEnforcedPowerLimit, "power_limit_mw")
UINT_FIELD(nvmlDeviceGetPowerUsage, "power_mw")
UINT_FIELD(nvmlDeviceGetPersistenceMode, "persistence")
UINT_FIELD(nvmlDeviceGetPcieReplayCounter, "pcie.replay")
UINT_FIELD(nvmlDeviceGetCurrPcieLinkGeneration, "pcie.gen")
UINT_FIELD(nvmlDeviceGetMaxPcieLinkGeneration, "pcie.gen_max")
UINT_FIELD(nvmlDeviceGetCurrPcieLinkWidth, "pcie.width")
UINT_FIELD(nvmlDeviceGetMaxPcieLinkWidth, "pcie.width_max")
UINT_FIELD(nvmlDeviceGetRetiredPagesPendingStatus, "retired.pending")
UINT_FIELD(nvmlDeviceGetMinorNumber, "minor")

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned *temp) {
    DEVICE_ENTER("nvmlDeviceGetTemperature", device)
    long long v;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu_number((unsigned)gpu, "temperature", &v)) return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned)v;
    return NVML_SUCCESS;
}

/* thresholdType 0 shutdown, 1 slowdown, 2 memory maximum: gpu.<i>.temp_threshold.<name> */
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int thresholdType, unsigned *temp) {
    static const char *const names[] = {"temp_threshold.shutdown", "temp_threshold.slowdown",
                                        "temp_threshold.memory_max"};
    DEVICE_ENTER("nvmlDeviceGetTemperatureThreshold", device)
    long long v;
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    if (thresholdType < 0 || thresholdType > 2) return NVML_ERROR_NOT_SUPPORTED;
    if (!gpu_number((unsigned)gpu, names[thresholdType], &v)) return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned)v;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *rates) {
    DEVICE_ENTER("nvmlDeviceGetUtilizationRates", device)
    long long g, m;
    if (!both(gpu, "util_gpu", "util_memory", &g, &m)) return NVML_ERROR_NOT_SUPPORTED;
    rates->gpu = (unsigned)g, rates->memory = (unsigned)m;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned *current, unsigned *pending) {
    DEVICE_ENTER("nvmlDeviceGetMigMode", device)
    long long c, p;
    if (!both(gpu, "mig_current", "mig_pending", &c, &p)) return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned)c, *pending = (unsigned)p;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static nvmlReturn_t processes(nvmlDevice_t device, const char *function, const char *kind, unsigned *count,
                              nvmlProcessInfo_t *infos) {
    DEVICE_ENTER(function, device)
    char field[NAME_LEN];
    long long n = 0;
    snprintf(field, sizeof field, "%s.count", kind);
    gpu_number((unsigned)gpu, field, &n);
    if (n == 0) return *count = 0, NVML_SUCCESS;
    if (!infos || *count < (unsigned)n) return *count = (unsigned)n, NVML_ERROR_INSUFFICIENT_SIZE;
    for (long long i = 0; i < n; i++) {
        long long pid = 0, used = 0;
        snprintf(field, sizeof field, "%s.%lld.pid", kind, i);
        gpu_number((unsigned)gpu, field, &pid);
        snprintf(field, sizeof field, "%s.%lld.used", kind, i);
        gpu_number((unsigned)gpu, field, &used);
        infos[i] = (nvmlProcessInfo_t){(unsigned)pid, (unsigned long long)used, 0xFFFFFFFFu, 0xFFFFFFFFu};
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned *count, nvmlProcessInfo_t *infos) {
    return processes(device, "nvmlDeviceGetComputeRunningProcesses_v3", "compute", count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned *count, nvmlProcessInfo_t *infos) {
    return processes(device, "nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics", count, infos);
}

typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* Per-process samples from "util.N.{pid,sm,mem}"; none -> NVML_ERROR_NOT_FOUND, as the real
 * driver answers when no process ran since lastSeen. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *samples,
                                             unsigned *count, unsigned long long lastSeen) {
    DEVICE_ENTER("nvmlDeviceGetProcessUtilization", device)
    (void)lastSeen;
    char field[NAME_LEN];
    long long n = 0;
    gpu_number((unsigned)gpu, "util.count", &n);
    if (n == 0) return *count = 0, NVML_ERROR_NOT_FOUND;
    if (!samples || *count < (unsigned)n) return *count = (unsigned)n, NVML_ERROR_INSUFFICIENT_SIZE;
    for (long long i = 0; i < n; i++) {
        long long pid = 0, sm = 0, mem = 0;
        snprintf(field, sizeof field, "util.%lld.pid", i);
        gpu_number((unsigned)gpu, field, &pid);
        snprintf(field, sizeof field, "util.%lld.sm", i);
        gpu_number((unsigned)gpu, field, &sm);
        snprintf(field, sizeof field, "util.%lld.mem", i);
        gpu_number((unsigned)gpu, field, &mem);
        samples[i] = (nvmlProcessUtilizationSample_t){(unsigned)pid, 1, (unsigned)sm, (unsigned)mem, 0, 0};
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

/* ---- health */

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned *current, unsigned *pending) {
    DEVICE_ENTER("nvmlDeviceGetEccMode", device)
    long long v;
    if (!gpu_number((unsigned)gpu, "ecc_mode", &v)) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned)v;
    return NVML_SUCCESS;
}

/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *count) {
    DEVICE_ENTER("nvmlDeviceGetTotalEccErrors", device)
    if (errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    char field[NAME_LEN];
    long long v;
    snprintf(field, sizeof field, "ecc.%s.%s", errorType ? "uncorrected" : "corrected",
             counterType ? "aggregate" : "volatile");
    if (!gpu_number((unsigned)gpu, field, &v)) return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned long long)v;
    return NVML_SUCCESS;
}

/* cause 0 multiple single-bit, 1 double-bit; gpu.<i>.retired.sbe / .dbe are page counts */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned *count, unsigned long long *addresses) {
    DEVICE_ENTER("nvmlDeviceGetRetiredPages", device)
    long long n;
    if (cause < 0 || cause > 1 || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu_number((unsigned)gpu, cause ? "retired.dbe" : "retired.sbe", &n)) return NVML_ERROR_NOT_SUPPORTED;
    if (!addresses || *count < (unsigned)n) {
        nvmlReturn_t r = (*count < (unsigned)n) ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
        *count = (unsigned)n;
        return r;
    }
    for (long long i = 0; i < n; i++) addresses[i] = 0x1000ULL * (unsigned long long)(i + 1);
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned *correctable, unsigned *uncorrectable,
                                       unsigned *pending, unsigned *failure) {
    DEVICE_ENTER("nvmlDeviceGetRemappedRows", device)
    long long c, u, p = 0, f = 0;
    if (!both(gpu, "remap.correctable", "remap.uncorrectable", &c, &u)) return NVML_ERROR_NOT_SUPPORTED;
    gpu_number((unsigned)gpu, "remap.pending", &p);
    gpu_number((unsigned)gpu, "remap.failure", &f);
    *correctable = (unsigned)c;
    *uncorrectable = (unsigned)u;
    *pending = (unsigned)p;
    *failure = (unsigned)f;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned max, high, partial, low, none;
} nvmlRowRemapperHistogramValues_t;

nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values) {
    DEVICE_ENTER("nvmlDeviceGetRowRemapperHistogram", device)
    long long v[5];
    static const char *const names[] = {"remap_histogram.max", "remap_histogram.high", "remap_histogram.partial",
                                        "remap_histogram.low", "remap_histogram.none"};
    if (!values) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < 5; i++)
        if (!gpu_number((unsigned)gpu, names[i], &v[i])) return NVML_ERROR_NOT_SUPPORTED;
    *values = (nvmlRowRemapperHistogramValues_t){(unsigned)v[0], (unsigned)v[1], (unsigned)v[2], (unsigned)v[3],
                                                 (unsigned)v[4]};
    return NVML_SUCCESS;
}

ONE_FIELD(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, "clocks_event_reasons")

static int link_field(int gpu, unsigned link, const char *field, long long *out) {
    long long links = 0;
    char name[NAME_LEN];
    if (!gpu_number((unsigned)gpu, "nvlink.links", &links) || link >= (unsigned long long)links) return 0;
    snprintf(name, sizeof name, "nvlink.%u.%s", link, field);
    *out = 0;
    gpu_number((unsigned)gpu, name, out);
    return 1;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, unsigned *active) {
    DEVICE_ENTER("nvmlDeviceGetNvLinkState", device)
    long long v;
    if (!link_field(gpu, link, "active", &v)) return NVML_ERROR_NOT_SUPPORTED;
    *active = (unsigned)v;
    return NVML_SUCCESS;
}

/* counter 0 replay, 1 recovery, 2 CRC flit, 3 CRC data */
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned link, int counter,
                                             unsigned long long *value) {
    static const char *names[] = {"replay", "recovery", "crc_flit", "crc_data"};
    DEVICE_ENTER("nvmlDeviceGetNvLinkErrorCounter", device)
    long long v;
    if (counter < 0 || counter > 3) return NVML_ERROR_NOT_SUPPORTED;
    if (!link_field(gpu, link, names[counter], &v)) return NVML_ERROR_NOT_SUPPORTED;
    *value = (unsigned long long)v;
    return NVML_SUCCESS;
}

/* ---- the fabric cluster a GPU belongs to (topology): gpu.<i>.fabric.cluster_uuid, 32 hex
 * digits (dashes allowed, as a UUID is written); absent or malformed: all zero, as a GPU the
 * fabric manager named no cluster for */

static void fabric_cluster_uuid(unsigned gpu, unsigned char out[16]) {
    char key[NAME_LEN], text[64];
    unsigned char bytes[16];
    memset(out, 0, 16);
    snprintf(key, sizeof key, "gpu.%u.fabric.cluster_uuid", gpu);
    if (copy_text(key, text, sizeof text) != NVML_SUCCESS) return;
    int n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '-') continue;
        int hi = *p, lo = p[1];
        if (!lo || n >= 16) return;
        unsigned value;
        char pair[3] = {(char)hi, (char)lo, 0};
        if (sscanf(pair, "%2x", &value) != 1 || !strchr("0123456789abcdefABCDEF", hi) || !strchr("0123456789abcdefABCDEF", lo)) return;
        bytes[n++] = (unsigned char)value;
        p++;
    }
    if (n == 16) memcpy(out, bytes, 16);
}

typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned cliqueId;
    unsigned state;
} nvmlGpuFabricInfo_t;

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    DEVICE_ENTER("nvmlDeviceGetGpuFabricInfo", device)
    long long state, status = 0, clique = 0;
    if (!gpu_number((unsigned)gpu, "fabric.state", &state)) return NVML_ERROR_NOT_SUPPORTED;
    gpu_number((unsigned)gpu, "fabric.status", &status);
    gpu_number((unsigned)gpu, "fabric.clique", &clique);
    memset(info, 0, sizeof *info);
    info->state = (unsigned)state;
    info->status = (nvmlReturn_t)status;
    info->cliqueId = (unsigned)clique;
    fabric_cluster_uuid((unsigned)gpu, info->clusterUuid);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType;
    nvmlReturn_t nvmlReturn;
    union {
        double d;
        unsigned ui;
        unsigned long long ull;
    } value;
} nvmlFieldValue_t;

/* The field ids the agent asks for, and the state key each reads (nvml.h's NVML_FI_*) */
static const struct {
    unsigned id;
    const char *field;
} fields[] = {
    {1, "ecc_mode"}, {3, "ecc.corrected.volatile"}, {4, "ecc.uncorrected.volatile"}, {5, "ecc.corrected.aggregate"},
    {6, "ecc.uncorrected.aggregate"}, {29, "retired.sbe"}, {30, "retired.dbe"}, {31, "retired.pending"},
    {82, "memory_temperature"}, {91, "nvlink.links"}, {94, "pcie.replay"}, {230, "recovery_action"},
};
/* NVLink totals over every link: field id -> the per-link counter summed */
static const struct {
    unsigned id;
    const char *counter;
} link_totals[] = {{38, "crc_flit"}, {45, "crc_data"}, {52, "replay"}, {59, "recovery"}};

#define FIELD_NVLINK_GET_STATE 165 /* per link: scopeId is the link */

static int field_value(int gpu, unsigned id, unsigned scope, unsigned long long *out) {
    long long v;
    if (id == FIELD_NVLINK_GET_STATE) {
        if (!link_field(gpu, scope, "active", &v)) return 0;
        *out = (unsigned long long)v;
        return 1;
    }
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].id == id) {
            if (!gpu_number((unsigned)gpu, fields[i].field, &v)) return 0;
            *out = (unsigned long long)v;
            return 1;
        }
    for (size_t i = 0; i < sizeof link_totals / sizeof link_totals[0]; i++)
        if (link_totals[i].id == id) {
            long long links = 0;
            if (!gpu_number((unsigned)gpu, "nvlink.links", &links)) return 0;
            *out = 0;
            for (unsigned link = 0; link < (unsigned long long)links && link < MAX_LINKS; link++)
                if (link_field(gpu, link, link_totals[i].counter, &v)) *out += (unsigned long long)v;
            return 1;
        }
    return 0;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    DEVICE_ENTER("nvmlDeviceGetFieldValues", device)
    if (count < 0 || (count && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        unsigned long long v;
        values[i].timestamp = (long long)time(NULL) * 1000000LL;
        values[i].latencyUsec = 0;
        if (field_value(gpu, values[i].fieldId, values[i].scopeId, &v)) {
            values[i].valueType = 3; /* unsigned long long */
            values[i].nvmlReturn = NVML_SUCCESS;
            values[i].value.ull = v;
        } else {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- events: event.<n> entries past the count at the set's creation are delivered once,
 * to the sets whose GPU registered that type */

struct nvmlEventSet_st {
    unsigned long long masks[MAX_GPUS];
    long long delivered;
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t r = enter("nvmlEventSetCreate", -1);
    if (r) return r;
    *set = calloc(1, sizeof **set);
    if (!*set) return NVML_ERROR_UNKNOWN;
    long long seen = 0;
    number("events", &seen);
    (*set)->delivered = seen;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}

ONE_FIELD(nvmlDeviceGetSupportedEventTypes, unsigned long long, "events")

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    DEVICE_ENTER("nvmlDeviceRegisterEvents", device)
    long long supported;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu_number((unsigned)gpu, "events", &supported) || (types & ~(unsigned long long)supported))
        return NVML_ERROR_NOT_SUPPORTED;
    set->masks[gpu] |= types;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    nvmlReturn_t r = enter("nvmlEventSetWait_v2", -1);
    if (r) return r;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        long long total = 0, v;
        if (!reload()) return NVML_ERROR_UNKNOWN;
        if (number("event_wait_error", &v)) return (nvmlReturn_t)v;
        /* as NVML documents: a registered GPU that fell off the bus ends the wait */
        for (int gpu = 0; gpu < MAX_GPUS; gpu++)
            if (set->masks[gpu] && gpu_number((unsigned)gpu, "lost", &v) && v) return NVML_ERROR_GPU_IS_LOST;
        number("events", &total);
        while (set->delivered < total) {
            long long n = set->delivered++, gpu = -1, type = 0, payload = 0;
            char key[NAME_LEN];
            snprintf(key, sizeof key, "event.%lld.gpu", n);
            number(key, &gpu);
            snprintf(key, sizeof key, "event.%lld.type", n);
            number(key, &type);
            snprintf(key, sizeof key, "event.%lld.data", n);
            number(key, &payload);
            if (gpu >= 0 && gpu < MAX_GPUS && (set->masks[gpu] & (unsigned long long)type)) {
                *data = (nvmlEventData_t){&devices[gpu], (unsigned long long)type, (unsigned long long)payload,
                                          0xFFFFFFFFu, 0xFFFFFFFFu};
                return NVML_SUCCESS;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long waited = (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000LL;
        if (waited >= timeout_ms) return NVML_ERROR_TIMEOUT;
        sleep_ms(10);
    }
}

#include "gpm.c"
