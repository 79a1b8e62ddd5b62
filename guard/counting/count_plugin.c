/* guard's counting plugin for QEMU's TCG (user mode): instructions and bytes moved between
 * two marker instructions.
 *
 * Built on first use with the system C compiler (guard/counting/emulator.py, cached by the
 * hash of this file, the compiler and the emulator) and loaded with
 *   qemu-x86_64 -cpu max -plugin PLUGIN.so,out=FILE PROGRAM...
 * Between a start marker and a stop marker executed by one thread, it counts the guest
 * instructions that thread executes (the markers themselves excluded) and every memory
 * access it makes (loads and stores, and their bytes, from the memory callbacks). At each
 * stop marker it appends one line to FILE:
 *   region INSNS LOADS STORES LOAD_BYTES STORE_BYTES
 * so a program that marks each inference gets one line per inference. With ranges=FILE
 * (lines "START END", hex guest addresses, END exclusive, sorted, at most MAX_RANGES; the
 * generated kernels' symbols) each region line is followed by one line per range that ran
 * in the region:
 *   range INDEX INSNS
 * An instruction outside every range (a helper the kernel calls, libc) counts to the range
 * that ran last, so a kernel's count includes its callees and a caller given its own range
 * (the entry that calls the kernels) keeps the glue between them.
 * Other threads are
 * not counted (counted runs are single-threaded; a region that another thread interrupts
 * still counts only its own thread).
 *
 * Markers are no-ops to the CPU and never emitted by compilers:
 *   x86_64:  nopl 0x47524431(%rax) (start), nopl 0x47524430(%rax) (stop)
 *            bytes 0f 1f 80 31 44 52 47 / 0f 1f 80 30 44 52 47
 *   aarch64: hint #90 (start), hint #91 (stop): unallocated hints execute as NOP
 *            words 0xd5032b5f / 0xd5032b7f
 *
 * QEMU does not ship qemu-plugin.h in Debian's packages, so the few documented plugin-API
 * functions used here are declared below, as in QEMU 7.2's header (plugin API version 1).
 * GUARD_QEMU_INSN_COPY selects the copying qemu_plugin_insn_data of QEMU 9 and later.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info_t;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*vcpu_udata_cb)(unsigned int vcpu_index, void *udata);
typedef void (*vcpu_mem_cb)(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr,
                            void *udata);
typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *udata);

#ifndef GUARD_QEMU_PLUGIN_VERSION
#define GUARD_QEMU_PLUGIN_VERSION 1
#endif
EXPORT int qemu_plugin_version = GUARD_QEMU_PLUGIN_VERSION;

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, vcpu_udata_cb cb,
                                          enum qemu_plugin_cb_flags flags, void *udata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, vcpu_udata_cb cb,
                                            enum qemu_plugin_cb_flags flags, void *udata);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, vcpu_mem_cb cb,
                                      enum qemu_plugin_cb_flags flags,
                                      enum qemu_plugin_mem_rw rw, void *udata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb, void *udata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info);
bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info);
#ifdef GUARD_QEMU_INSN_COPY
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *insn, void *dest, size_t len);
#else
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
#endif

enum { PLAIN = 0, START = 1, STOP = 2 };

static const unsigned char X86_START[7] = {0x0f, 0x1f, 0x80, 0x31, 0x44, 0x52, 0x47};
static const unsigned char X86_STOP[7] = {0x0f, 0x1f, 0x80, 0x30, 0x44, 0x52, 0x47};
static const unsigned char A64_START[4] = {0x5f, 0x2b, 0x03, 0xd5};
static const unsigned char A64_STOP[4] = {0x7f, 0x2b, 0x03, 0xd5};

#define MAX_RANGES 4096
static uint64_t range_lo[MAX_RANGES], range_hi[MAX_RANGES], range_insns[MAX_RANGES];
static size_t n_ranges;
static int64_t current = -1; /* the range that ran last in this region */

static FILE *out;
static int64_t active = -1; /* the vCPU (thread) inside a region, or -1 */
static uint64_t insns, loads, stores, load_bytes, store_bytes;

static int marker_kind(const struct qemu_plugin_insn *insn) {
    size_t n = qemu_plugin_insn_size(insn);
    unsigned char bytes[16];
    if (n != sizeof X86_START && n != sizeof A64_START) return PLAIN;
#ifdef GUARD_QEMU_INSN_COPY
    if (qemu_plugin_insn_data(insn, bytes, n) != n) return PLAIN;
#else
    memcpy(bytes, qemu_plugin_insn_data(insn), n);
#endif
    if (n == sizeof X86_START) {
        if (memcmp(bytes, X86_START, n) == 0) return START;
        if (memcmp(bytes, X86_STOP, n) == 0) return STOP;
    } else {
        if (memcmp(bytes, A64_START, n) == 0) return START;
        if (memcmp(bytes, A64_STOP, n) == 0) return STOP;
    }
    return PLAIN;
}

/* The range holding guest address a, or -1 (binary search over the sorted ranges). */
static int64_t range_of(uint64_t a) {
    size_t lo = 0, hi = n_ranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a < range_lo[mid]) hi = mid;
        else if (a >= range_hi[mid]) lo = mid + 1;
        else return (int64_t)mid;
    }
    return -1;
}

/* A block's udata: its instruction count in the low 32 bits, its range + 1 above. */
static void on_tb(unsigned int vcpu, void *udata) {
    if ((int64_t)vcpu != active) return;
    uint64_t d = (uint64_t)(uintptr_t)udata, n = d & 0xffffffffu, r = d >> 32;
    insns += n;
    if (r) current = (int64_t)r - 1;
    if (current >= 0) range_insns[current] += n;
}

static void on_insn(unsigned int vcpu, void *udata) {
    /* udata: the marker kind in the low 2 bits, the instruction's range + 1 above. */
    uint64_t d = (uint64_t)(uintptr_t)udata;
    int kind = (int)(d & 3);
    if (kind == START) {
        active = (int64_t)vcpu;
        insns = loads = stores = load_bytes = store_bytes = 0;
        memset(range_insns, 0, sizeof range_insns);
        current = -1;
    } else if (kind == STOP) {
        if ((int64_t)vcpu != active) return;
        active = -1;
        if (out) {
            fprintf(out, "region %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                    insns, loads, stores, load_bytes, store_bytes);
            for (size_t r = 0; r < n_ranges; r++)
                if (range_insns[r]) fprintf(out, "range %zu %" PRIu64 "\n", r, range_insns[r]);
            fflush(out);
        }
    } else if ((int64_t)vcpu == active) {
        insns++;
        uint64_t r = d >> 2;
        if (r) current = (int64_t)r - 1;
        if (current >= 0) range_insns[current]++;
    }
}

static void on_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata) {
    (void)vaddr;
    (void)udata;
    if ((int64_t)vcpu != active) return;
    uint64_t size = (uint64_t)1 << qemu_plugin_mem_size_shift(info);
    if (qemu_plugin_mem_is_store(info)) {
        stores++;
        store_bytes += size;
    } else {
        loads++;
        load_bytes += size;
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    int has_marker = 0;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        qemu_plugin_register_vcpu_mem_cb(insn, on_mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
                                         NULL);
        if (marker_kind(insn) != PLAIN) has_marker = 1;
    }
    /* One callback per block counting all its instructions, when they all lie in one
     * range (or none) and none is a marker: the common case. */
    int64_t range = n ? range_of(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, 0))) : -1;
    int one_range = 1;
    for (size_t i = 1; i < n && n_ranges; i++)
        if (range_of(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i))) != range) one_range = 0;
    if (!has_marker && one_range) {
        uint64_t d = ((uint64_t)(range + 1) << 32) | (uint64_t)n;
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb, QEMU_PLUGIN_CB_NO_REGS,
                                             (void *)(uintptr_t)d);
        return;
    }
    /* A block with a marker (or across ranges) counts instruction by instruction, so a
     * region starts and ends exactly at its markers. */
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t r = (uint64_t)(range_of(qemu_plugin_insn_vaddr(insn)) + 1);
        qemu_plugin_register_vcpu_insn_exec_cb(insn, on_insn, QEMU_PLUGIN_CB_NO_REGS,
                                               (void *)(uintptr_t)((r << 2) | (uint64_t)marker_kind(insn)));
    }
}

static void at_exit(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    if (out) fclose(out);
    out = NULL;
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info, int argc,
                               char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "ranges=", 7) == 0) {
            FILE *f = fopen(argv[i] + 7, "r");
            if (!f) {
                fprintf(stderr, "guard count plugin: cannot read %s\n", argv[i] + 7);
                return -1;
            }
            unsigned long long lo, hi;
            while (n_ranges < MAX_RANGES && fscanf(f, "%llx %llx", &lo, &hi) == 2) {
                range_lo[n_ranges] = lo;
                range_hi[n_ranges++] = hi;
            }
            fclose(f);
        } else if (strncmp(argv[i], "out=", 4) == 0) {
            out = fopen(argv[i] + 4, "w");
            if (!out) {
                fprintf(stderr, "guard count plugin: cannot write %s\n", argv[i] + 4);
                return -1;
            }
        }
    }
    if (!out) {
        fprintf(stderr, "guard count plugin: give out=FILE\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
