/*
 * A fake libnvidia-ml.so.1 for tests: the entry points the agent calls, with nvml.h's
 * signatures and struct layouts, over a fixed node of three GPUs:
 *   GPU 0  no MIG (GetMigMode: NOT_SUPPORTED); 3 compute processes (one with usedGpuMemory
 *          NVML_VALUE_NOT_AVAILABLE), 1 MPS process;
 *   GPU 1  MIG on: 7 slots, instances at slots 0 (GI 1) and 2 (GI 5), the others NOT_FOUND;
 *          MIG 0 has 2 processes; MIG 2 answers memory v2 with NOT_SUPPORTED (v1 only);
 *   GPU 2  MIG off (mode 0, pending 1), no processes, MPS listing NOT_SUPPORTED.
 * Every process listing follows NVML's two-call pattern: a call with too small a count gets
 * NVML_ERROR_INSUFFICIENT_SIZE and the count needed.
 * Variants: -DNO_V3 (an older driver: no *_v3 process calls), -DNO_V2 (older still: only the
 * unversioned v1 process calls, no nvmlDeviceGetMemoryInfo_v2), -DNO_NAME (no
 * nvmlDeviceGetName: a library our binding refuses at init).
 * fake_last_process_call() names the last process entry point called, for the tests.
 */
#include <stddef.h>
#include <string.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t;
#define NVML_STRUCT_VERSION(s, v) (unsigned int)(sizeof(nvml##s##_v##v##_t) | ((v) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes in nvml.h");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t is 24 bytes");

#define NA 0xFFFFFFFFFFFFFFFFULL
#define MAXP 4

typedef struct {
    const char *uuid, *name;
    int mig_mode, mig_pending; /* -1: NOT_SUPPORTED */
    unsigned int gi;
    int memory_v2; /* 0: NOT_SUPPORTED */
    unsigned long long total, reserved, free, used;
    int nprocs; nvmlProcessInfo_t procs[MAXP];
    int nmps; /* -1: NOT_SUPPORTED */ nvmlProcessInfo_t mps[MAXP];
} device_t;
typedef device_t *nvmlDevice_t;

static device_t gpus[3] = {
    {"GPU-0a1b2c3d-0000-4000-8000-000000000000", "NVIDIA H200", -1, -1, 0, 1,
     150754820096ULL, 570621952ULL, 139611545600ULL, 10572652544ULL,
     3, {{4101, 1713373184ULL, 0xFFFFFFFFu, 0xFFFFFFFFu},
         {4102, 2787115008ULL, 0xFFFFFFFFu, 0xFFFFFFFFu},
         {4103, NA, 0xFFFFFFFFu, 0xFFFFFFFFu}},
     1, {{4200, 524288000ULL, 0xFFFFFFFFu, 0xFFFFFFFFu}}},
    {"GPU-1a1b2c3d-1111-4111-8111-111111111111", "NVIDIA A100-SXM4-80GB", 1, 1, 0, 1,
     85899345920ULL, 0ULL, 0ULL, 0ULL, 0, {{0}}, 0, {{0}}},
    {"GPU-2a1b2c3d-2222-4222-8222-222222222222", "Tesla T4", 0, 1, 0, 1,
     16106127360ULL, 268435456ULL, 15569256448ULL, 268435456ULL, 0, {{0}}, -1, {{0}}},
};
static device_t migs[7] = {
    {"MIG-aaaaaaaa-0000-5000-9000-000000000001", "NVIDIA A100-SXM4-80GB MIG 3g.40gb", -1, -1,
     1, 1, 42949672960ULL, 33554432ULL, 40802189312ULL, 2113929216ULL,
     2, {{5101, 1073741824ULL, 1, 0}, {5102, 1040187392ULL, 1, 0}}, 0, {{0}}},
    {0},
    {"MIG-aaaaaaaa-2222-5222-9222-000000000005", "NVIDIA A100-SXM4-80GB MIG 1g.10gb", -1, -1,
     5, 0, 10737418240ULL, 0ULL, 10703863808ULL, 33554432ULL, 0, {{0}}, 0, {{0}}},
};

static int initialised;
static const char *last_process_call = "";

const char *fake_last_process_call(void) { return last_process_call; }

nvmlReturn_t nvmlInit_v2(void) { initialised++; return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}
const char *nvmlErrorString(nvmlReturn_t r) { return r == 0 ? "Success" : "Fake Error"; }

#define NEED_INIT if (!initialised) return NVML_ERROR_UNINITIALIZED

static int valid(nvmlDevice_t d) {
    return d != NULL && ((d >= gpus && d < gpus + 3) || (d >= migs && d < migs + 7 && d->uuid));
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    NEED_INIT; if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 3; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    NEED_INIT; if (index >= 3 || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index]; return NVML_SUCCESS;
}
static nvmlReturn_t copy_text(const char *s, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    NEED_INIT; if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_text(d->uuid, uuid, length);
}
#ifndef NO_NAME
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    NEED_INIT; if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_text(d->name, name, length);
}
#endif
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    NEED_INIT; if (!valid(d) || !m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->total; m->free = d->free; m->used = d->used + d->reserved;
    return NVML_SUCCESS;
}
#ifndef NO_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    NEED_INIT; if (!valid(d) || !m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!d->memory_v2) return NVML_ERROR_NOT_SUPPORTED;
    m->total = d->total; m->reserved = d->reserved; m->free = d->free; m->used = d->used;
    return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    NEED_INIT; if (!valid(d) || !current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned int)d->mig_mode; *pending = (unsigned int)d->mig_pending;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    NEED_INIT; if (!valid(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = d == &gpus[1] ? 7 : 0; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t *mig) {
    NEED_INIT; if (!valid(d) || !mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (d != &gpus[1] || index >= 7) return NVML_ERROR_INVALID_ARGUMENT;
    if (!migs[index].uuid) return NVML_ERROR_NOT_FOUND;
    *mig = &migs[index]; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    NEED_INIT; if (!valid(d) || !id) return NVML_ERROR_INVALID_ARGUMENT;
    if (d < migs || d >= migs + 7) return NVML_ERROR_NOT_SUPPORTED;
    *id = d->gi; return NVML_SUCCESS;
}

/* NVML's two-call pattern over one list; `stride` is the caller's struct size. */
static nvmlReturn_t list(const char *call, nvmlDevice_t d, int mps, unsigned int *count,
                         void *infos, int v1) {
    NEED_INIT; if (!valid(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    last_process_call = call;
    int n = mps ? d->nmps : d->nprocs;
    const nvmlProcessInfo_t *src = mps ? d->mps : d->procs;
    if (n < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (*count < (unsigned int)n || (n > 0 && !infos)) {
        *count = (unsigned int)n; return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + i;
            o->pid = src[i].pid; o->usedGpuMemory = src[i].usedGpuMemory;
        } else {
            ((nvmlProcessInfo_t *)infos)[i] = src[i];
        }
    }
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

#define PROCESS_CALLS(NAME, MPS)                                                          \
    nvmlReturn_t NAME(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) {       \
        return list(#NAME, d, MPS, c, i, 1);                                              \
    }                                                                                     \
    V2(nvmlReturn_t NAME##_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) { \
        return list(#NAME "_v2", d, MPS, c, i, 0);                                        \
    })                                                                                    \
    V3(nvmlReturn_t NAME##_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) {   \
        return list(#NAME "_v3", d, MPS, c, i, 0);                                        \
    })

#if defined(NO_V2)
#define V2(x)
#define V3(x)
#elif defined(NO_V3)
#define V2(x) x
#define V3(x)
#else
#define V2(x) x
#define V3(x) x
#endif

PROCESS_CALLS(nvmlDeviceGetComputeRunningProcesses, 0)
PROCESS_CALLS(nvmlDeviceGetMPSComputeRunningProcesses, 1)
