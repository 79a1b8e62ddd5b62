/* guard's emulation runner: calls one artefact's entry function on inputs read from files.
 *
 * Built per artefact for the target (aarch64-linux-gnu-gcc -static, linked with the
 * artefact's object file) and run under user-mode emulation (qemu-aarch64-static), so
 * numerics, partitions and arena of a foreign-architecture artefact are checked on any
 * host. It does no arithmetic of its own: the generated code is the thing under test.
 *
 *   runner ARENA_BYTES WEIGHTS_FILE COUNT N_IN IN_FILE... N_OUT OUT_FILE:NBYTES...
 *
 * The entry is the artefact's one function, compiled in as GUARD_ENTRY:
 *   void GUARD_ENTRY(void *arena, const void *weights,
 *                    const void *const *inputs, void *const *outputs);
 * (a status the entry returns in x0 is ignored: the AAPCS64 makes that call the same.)
 * Weights and inputs are mapped read-only from their files (page aligned); the arena and
 * the outputs are 64-byte aligned and zeroed. Each input file holds COUNT samples back to
 * back; the entry runs once per sample and each output file receives COUNT results, so a
 * data set costs one emulator start, not one per sample.
 *
 * Exit status: 0 done; 2 bad arguments; 3 an input/output error (the message names the
 * file). A crash in generated code is the signal itself (the emulator re-raises it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef GUARD_ENTRY
#error "build with -DGUARD_ENTRY=<the artefact's entry symbol>"
#endif

extern void GUARD_ENTRY(void *arena, const void *weights, const void *const *inputs,
                        void *const *outputs);

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

/* Maps a file read-only; an empty file maps to an aligned, empty buffer. */
static const unsigned char *map_file(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return NULL; }
    *size = (size_t)st.st_size;
    if (*size == 0) { close(fd); return empty_blob; }
    void *p = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : (const unsigned char *)p;
}

static void *zeroed(size_t nbytes) {
    size_t n = (nbytes + ALIGN - 1) / ALIGN * ALIGN;
    void *p = aligned_alloc(ALIGN, n ? n : ALIGN);
    if (p) memset(p, 0, n ? n : ALIGN);
    return p;
}

int main(int argc, char **argv) {
    size_t arena_bytes, count, n_in, n_out;
    if (argc < 6 || parse_size(argv[1], &arena_bytes) || parse_size(argv[3], &count)
        || parse_size(argv[4], &n_in) || n_in > MAX_TENSORS || count == 0) {
        fprintf(stderr, "usage: %s ARENA_BYTES WEIGHTS_FILE COUNT N_IN IN_FILE... "
                        "N_OUT OUT_FILE:NBYTES...\n", argv[0]);
        return 2;
    }
    int at = 5;
    if ((size_t)(argc - at) < n_in + 1 || parse_size(argv[at + n_in], &n_out)
        || n_out > MAX_TENSORS || (size_t)(argc - at) != n_in + 1 + n_out) {
        fprintf(stderr, "guard-runner: expected %zu input file(s), then N_OUT and as many "
                        "OUT_FILE:NBYTES\n", n_in);
        return 2;
    }
    size_t wbytes;
    const unsigned char *weights = map_file(argv[2], &wbytes);
    if (!weights) return fail(3, "cannot map weights", argv[2]);

    static const unsigned char *in_base[MAX_TENSORS];
    static size_t in_stride[MAX_TENSORS];
    for (size_t i = 0; i < n_in; i++) {
        const char *path = argv[at + i];
        size_t size;
        in_base[i] = map_file(path, &size);
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
    if (!arena) return fail(3, "cannot allocate the arena of", argv[1]);

    static const void *inputs[MAX_TENSORS];
    for (size_t s = 0; s < count; s++) {
        for (size_t i = 0; i < n_in; i++) inputs[i] = in_base[i] + s * in_stride[i];
        GUARD_ENTRY(arena, weights, inputs, out_buf);
        for (size_t o = 0; o < n_out; o++) {
            if (fwrite(out_buf[o], 1, out_bytes[o], out_file[o]) != out_bytes[o])
                return fail(3, "cannot write output", argv[at + o]);
        }
    }
    for (size_t o = 0; o < n_out; o++) {
        if (fclose(out_file[o]) != 0) return fail(3, "cannot close output", argv[at + o]);
    }
    return 0;
}
