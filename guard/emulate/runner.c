/* guard's emulation runner: calls an artefact's generated entry functions from files.
 *
 * Built per artefact for the target (aarch64-linux-gnu-gcc -static, linked with the
 * artefact's object file and a generated table of its entry symbols) and run under
 * user-mode emulation (qemu-aarch64-static), so numerics, partitions and arena of a
 * foreign-architecture artefact are checked on any host. It does no arithmetic of its own:
 * the generated code is the thing under test.
 *
 * The entries (guard/compiler/codegen/module.py):
 *   main:      void f(void *arena, const void *weights, const void *packed,
 *                     const void *const *inputs, void *const *outputs)
 *   partition: void f(void *arena, const void *weights, const void *packed)
 *
 *   runner call MAIN ARENA_BYTES WEIGHTS PACKED COUNT N_IN IN_FILE... N_OUT OUT_FILE:NBYTES...
 *     Weights, packed constants and inputs are mapped read-only from their files; the
 *     arena and the outputs are 64-byte aligned and zeroed. Each input file holds COUNT
 *     samples back to back; MAIN runs once per sample and each output file receives COUNT
 *     results, so a data set costs one emulator start, not one per sample.
 *   runner serve ARENA_FILE WEIGHTS PACKED
 *     Maps ARENA_FILE shared and read-write (the host maps it too), then reads partition
 *     symbols from stdin, one a line, calls each and answers "ok SYMBOL" on stdout: the
 *     host runs the partitions that are not generated code in between, over the same
 *     arena. Ends at end of input.
 *
 * Counting (guard/counting/count.py): with GUARD_COUNT_FROM=K in the environment, each call
 * of MAIN from sample K on is wrapped in the counting plugin's marker instructions
 * (count_plugin.c), so warm-up samples run uncounted and every later one is one region.
 * With GUARD_PMU_OUT=FILE too (the hardware-counter engine, guard/counting/pmu.py), the
 * runner runs natively and wraps each of those calls in a perf_event_open counter instead
 * (GUARD_PMU_EVENT=TYPE:CONFIG, default user-mode instructions; opened before the thread
 * pool starts, inherited by its threads, reset and enabled just before the call, disabled
 * just after) and appends "pmu VALUE TIME_ENABLED TIME_RUNNING" to FILE per call.
 *
 * Exit status: 0 done; 2 bad arguments or an unknown symbol; 3 an input/output error (the
 * message names the file). A crash in generated code is the signal itself (the emulator
 * re-raises it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*main_fn)(void *, const void *, const void *, const void *const *, void *const *);
typedef void (*part_fn)(void *, const void *, const void *);
struct main_entry { const char *name; main_fn fn; };
struct part_entry { const char *name; part_fn fn; };
/* Generated per artefact (guard/emulate/runner.py), each ending with {0, 0}. */
extern const struct main_entry guard_runner_mains[];
extern const struct part_entry guard_runner_parts[];

#if defined(__x86_64__)
#define MARK_START() __asm__ volatile(".byte 0x0f,0x1f,0x80,0x31,0x44,0x52,0x47" ::: "memory")
#define MARK_STOP() __asm__ volatile(".byte 0x0f,0x1f,0x80,0x30,0x44,0x52,0x47" ::: "memory")
#elif defined(__aarch64__)
#define MARK_START() __asm__ volatile("hint #90" ::: "memory")
#define MARK_STOP() __asm__ volatile("hint #91" ::: "memory")
#else
#define MARK_START() ((void)0)
#define MARK_STOP() ((void)0)
#endif

#define MAX_TENSORS 4096
#define ALIGN 64

static unsigned char empty_blob[ALIGN] __attribute__((aligned(ALIGN)));

static int fail(int code, const char *what, const char *path) {
    fprintf(stderr, "guard-runner: %s %s: %s\n", what, path, strerror(errno));
    return code;
}

static int parse_size(const char *text, size_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end != '\0') return -1;
    *out = (size_t)v;
    return 0;
}

/* Maps a file (read-only, or shared read-write); an empty file maps to an empty buffer. */
static unsigned char *map_file(const char *path, size_t *size, int writable) {
    int fd = open(path, writable ? O_RDWR : O_RDONLY);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return NULL; }
    *size = (size_t)st.st_size;
    if (*size == 0) { close(fd); return empty_blob; }
    void *p = mmap(NULL, *size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   writable ? MAP_SHARED : MAP_PRIVATE, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : (unsigned char *)p;
}

/* The hardware-counter engine's counter and its output (GUARD_PMU_OUT), or -1/NULL. */
static int pmu_fd = -1;
static FILE *pmu_out = NULL;

static int pmu_open(void) {
    const char *path = getenv("GUARD_PMU_OUT");
    if (!path) return 0;
    unsigned long long type = PERF_TYPE_HARDWARE, config = PERF_COUNT_HW_INSTRUCTIONS;
    const char *event = getenv("GUARD_PMU_EVENT");
    if (event && sscanf(event, "%llu:%llu", &type, &config) != 2) {
        fprintf(stderr, "guard-runner: GUARD_PMU_EVENT=%s is not TYPE:CONFIG\n", event);
        return 2;
    }
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = (unsigned)type;
    attr.config = config;
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    attr.disabled = 1;
    attr.inherit = 1;  /* the generated code's pool threads, started after this */
    attr.pinned = 1;   /* never multiplexed: a pinned counter that loses the PMU reads 0 bytes */
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    pmu_fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (pmu_fd < 0) return fail(3, "perf_event_open for", event ? event : "instructions");
    pmu_out = fopen(path, "w");
    if (!pmu_out) return fail(3, "cannot create", path);
    return 0;
}

static void pmu_start(void) {
    ioctl(pmu_fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(pmu_fd, PERF_EVENT_IOC_ENABLE, 0);
}

static int pmu_stop(void) {
    ioctl(pmu_fd, PERF_EVENT_IOC_DISABLE, 0);
    unsigned long long v[3] = {0, 1, 0};  /* value, time enabled, time running */
    if (read(pmu_fd, v, sizeof v) != (ssize_t)sizeof v) { v[0] = 0; v[1] = 1; v[2] = 0; }
    fprintf(pmu_out, "pmu %llu %llu %llu\n", v[0], v[1], v[2]);
    return ferror(pmu_out) ? -1 : 0;
}

static void *zeroed(size_t nbytes) {
    size_t n = (nbytes + ALIGN - 1) / ALIGN * ALIGN;
    void *p = aligned_alloc(ALIGN, n ? n : ALIGN);
    if (p) memset(p, 0, n ? n : ALIGN);
    return p;
}

static int call_main(int argc, char **argv) {
    size_t arena_bytes, count, n_in, n_out;
    if (argc < 8 || parse_size(argv[3], &arena_bytes) || parse_size(argv[6], &count)
        || parse_size(argv[7], &n_in) || n_in > MAX_TENSORS || count == 0) {
        fprintf(stderr, "usage: %s call MAIN ARENA_BYTES WEIGHTS PACKED COUNT N_IN IN_FILE... "
                        "N_OUT OUT_FILE:NBYTES...\n", argv[0]);
        return 2;
    }
    main_fn fn = NULL;
    for (const struct main_entry *e = guard_runner_mains; e->name; e++)
        if (strcmp(e->name, argv[2]) == 0) fn = e->fn;
    if (!fn) {
        fprintf(stderr, "guard-runner: no main entry %s in this artefact\n", argv[2]);
        return 2;
    }
    int at = 8;
    if ((size_t)(argc - at) < n_in + 1 || parse_size(argv[at + n_in], &n_out)
        || n_out > MAX_TENSORS || (size_t)(argc - at) != n_in + 1 + n_out) {
        fprintf(stderr, "guard-runner: expected %zu input file(s), then N_OUT and as many "
                        "OUT_FILE:NBYTES\n", n_in);
        return 2;
    }
    size_t wbytes, pbytes;
    const unsigned char *weights = map_file(argv[4], &wbytes, 0);
    if (!weights) return fail(3, "cannot map weights", argv[4]);
    const unsigned char *packed = map_file(argv[5], &pbytes, 0);
    if (!packed) return fail(3, "cannot map packed constants", argv[5]);

    static const unsigned char *in_base[MAX_TENSORS];
    static size_t in_stride[MAX_TENSORS];
    for (size_t i = 0; i < n_in; i++) {
        const char *path = argv[at + i];
        size_t size;
        in_base[i] = map_file(path, &size, 0);
        if (!in_base[i]) return fail(3, "cannot map input", path);
        if (size % count) {
            fprintf(stderr, "guard-runner: input %s holds %zu bytes, not %zu whole samples\n",
                    path, size, count);
            return 2;
        }
        in_stride[i] = size / count;
    }
    at += n_in + 1;

    static FILE *out_file[MAX_TENSORS];
    static void *out_buf[MAX_TENSORS];
    static size_t out_bytes[MAX_TENSORS];
    for (size_t o = 0; o < n_out; o++) {
        char *spec = argv[at + o];
        char *colon = strrchr(spec, ':');
        if (!colon || parse_size(colon + 1, &out_bytes[o])) {
            fprintf(stderr, "guard-runner: expected OUT_FILE:NBYTES, got %s\n", spec);
            return 2;
        }
        *colon = '\0';
        out_file[o] = fopen(spec, "wb");
        if (!out_file[o]) return fail(3, "cannot create output", spec);
        out_buf[o] = zeroed(out_bytes[o]);
        if (!out_buf[o]) return fail(3, "cannot allocate output for", spec);
    }
    void *arena = zeroed(arena_bytes);
    if (!arena) return fail(3, "cannot allocate the arena of", argv[3]);

    size_t count_from = (size_t)-1;
    const char *from = getenv("GUARD_COUNT_FROM");
    if (from && parse_size(from, &count_from)) count_from = (size_t)-1;
    static const void *inputs[MAX_TENSORS];
    for (size_t s = 0; s < count; s++) {
        for (size_t i = 0; i < n_in; i++) inputs[i] = in_base[i] + s * in_stride[i];
        if (s >= count_from && pmu_fd >= 0) {
            pmu_start();
            fn(arena, weights, packed, inputs, out_buf);
            if (pmu_stop() != 0) return fail(3, "cannot write", getenv("GUARD_PMU_OUT"));
        } else if (s >= count_from) {
            MARK_START();
            fn(arena, weights, packed, inputs, out_buf);
            MARK_STOP();
        } else {
            fn(arena, weights, packed, inputs, out_buf);
        }
        for (size_t o = 0; o < n_out; o++) {
            if (fwrite(out_buf[o], 1, out_bytes[o], out_file[o]) != out_bytes[o])
                return fail(3, "cannot write output", argv[at + o]);
        }
    }
    for (size_t o = 0; o < n_out; o++) {
        if (fclose(out_file[o]) != 0) return fail(3, "cannot close output", argv[at + o]);
    }
    if (pmu_out && fclose(pmu_out) != 0) return fail(3, "cannot close", getenv("GUARD_PMU_OUT"));
    return 0;
}

static int serve(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s serve ARENA_FILE WEIGHTS PACKED\n", argv[0]);
        return 2;
    }
    size_t abytes, wbytes, pbytes;
    unsigned char *arena = map_file(argv[2], &abytes, 1);
    if (!arena) return fail(3, "cannot map the arena file", argv[2]);
    const unsigned char *weights = map_file(argv[3], &wbytes, 0);
    if (!weights) return fail(3, "cannot map weights", argv[3]);
    const unsigned char *packed = map_file(argv[4], &pbytes, 0);
    if (!packed) return fail(3, "cannot map packed constants", argv[4]);
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        part_fn fn = NULL;
        for (const struct part_entry *e = guard_runner_parts; e->name; e++)
            if (strcmp(e->name, line) == 0) fn = e->fn;
        if (!fn) {
            fprintf(stderr, "guard-runner: no partition entry %s in this artefact\n", line);
            return 2;
        }
        fn(arena, weights, packed);
        printf("ok %s\n", line);
        fflush(stdout);
    }
    return 0;
}

/* The generated code's thread pool (guard/compiler/codegen/threadpool.py): weak, so an object
   generated before the pool existed still links. GUARD_THREADS sets its threads. */
extern int guard_pool_start(int) __attribute__((weak));
extern void guard_pool_stop(void) __attribute__((weak));

static void start_pool(void) {
    const char *t = getenv("GUARD_THREADS");
    if (t && guard_pool_start) guard_pool_start(atoi(t));
}

static int stop_pool(int rc) {
    if (guard_pool_stop) guard_pool_stop();
    return rc;
}

int main(int argc, char **argv) {
    int rc = pmu_open();  /* before the pool: its threads inherit the counter */
    if (rc) return rc;
    start_pool();
    if (argc >= 2 && strcmp(argv[1], "call") == 0) return stop_pool(call_main(argc, argv));
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return stop_pool(serve(argc, argv));
    fprintf(stderr, "usage: %s call MAIN ... | serve ARENA_FILE WEIGHTS PACKED\n", argv[0]);
    return 2;
}
