/* What towerflow.backends._native's C files share (see _native.c's overview):
 * the includes, the pooling geometry and macros used by more than one file,
 * the argument helpers (defined in _native.c) and the entry points the method
 * table lists (each defined beside its kernels). Kernels stay static in their
 * own file, so that GCC inlines and clones them as it did in a single file. */
#ifndef TOWERFLOW_NATIVE_COMMON_H
#define TOWERFLOW_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t n, h, w, c;    /* input [N, H, W, C] */
    Py_ssize_t kh, kw;        /* window = strides */
    Py_ssize_t oh, ow;        /* output [N, OH, OW, C] */
} Geometry;

/* Channels per inner loop: the winner bits are worked on as integers as wide
 * as the floats (LANE), this many channels at a time, so that every loop
 * vectorises (loops mixing uint8 and float lanes did not, and ran 4x slower
 * than NumPy). */
#define BLOCK 64

/* Hot loops are compiled for AVX-512, AVX2 and plain x86-64, and the CPU picks
 * one at load time (GCC's target_clones): one build runs everywhere. (The GEMMs
 * are compiled per path instead, and chosen at run time: see native_gemm.h.) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_CLONES
#endif

/* Eight floats or doubles (a double_lanes is one AVX-512 register): the vectors
 * of the float64 sums of batch norm and of Winograd's filter transforms, which
 * load float_lanes or double_lanes and convert them. */
typedef float float_lanes __attribute__((vector_size(8 * sizeof(float))));
typedef double double_lanes __attribute__((vector_size(8 * sizeof(double))));

/* np.maximum(m, a): NaN in either gives NaN, ties keep the first argument. */
#define NP_MAX(m, a) (((m) >= (a) || (m) != (m)) ? (m) : (a))

/* One tap of a pooling window: max[] takes np.maximum with value[], and the
 * winner bits[] get ``bit`` where value[] is the (new or tied) maximum, exactly
 * as pool_kernels.py's NumPy passes do (max_pool and batch_norm_pool share it). */
#define POOL_TAP(T, value, max, bits, bit, tap, cb)                                     \
    if ((tap) == 0)                                                                     \
        for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                      \
            max[ch] = value[ch];                                                        \
            bits[ch] = value[ch] == value[ch] ? (bit) : 0;                              \
        }                                                                               \
    else                                                                                \
        for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                      \
            const T before = max[ch], after = NP_MAX(before, value[ch]);                \
            bits[ch] = (value[ch] == after ? (bit) : 0)                                 \
                       | (before == after ? bits[ch] : 0);                              \
            max[ch] = after;                                                            \
        }

/* Views of the arguments, released together by release_all (6: the most an entry
 * point takes). */
typedef struct {
    Py_buffer views[6];
    int held;
} Views;

/* name_f32(...) or name_f64(...) for buffers of kind 'f' or 'd'. */
#define BY_KIND(kind, name, ...)                                                        \
    do {                                                                                \
        if ((kind) == 'f')                                                              \
            name##_f32(__VA_ARGS__);                                                    \
        else                                                                            \
            name##_f64(__VA_ARGS__);                                                    \
    } while (0)

/* BY_KIND with the GIL released, at once: how the entry points that do not
 * record (see native_parts.c) run their kernel once they hold the views. */
#define RUN_WITHOUT_GIL(kind, name, ...)                                                \
    do {                                                                                \
        note_immediate_run(#name);                                                      \
        Py_BEGIN_ALLOW_THREADS                                                          \
        BY_KIND(kind, name, __VA_ARGS__);                                               \
        Py_END_ALLOW_THREADS                                                            \
    } while (0)

/* A kernel call whose arguments are parsed and whose buffers are held: run at
 * once, or recorded for run_parts (native_parts.c). An entry point that
 * records puts a Task first in a struct of its kernel's arguments. */
typedef struct Task Task;
struct Task {
    void (*run)(Task *task);   /* the kernel, called without the GIL */
    Task *next;                /* the part's next call */
    Views views;               /* held until the call has run */
    const char *out_of_memory; /* set by run: what could not be allocated */
};

/* The sizes whose product is a buffer's item count: SIZES(n, h, w, c). */
#define SIZES(...) (const Py_ssize_t[]){__VA_ARGS__}, \
    (int)(sizeof((const Py_ssize_t[]){__VA_ARGS__}) / sizeof(Py_ssize_t))

/* The helpers and entry points crossing files are extern; hidden, they stay
 * out of the .so's dynamic symbols (PyInit__native is its only export, as when
 * all of them were static in one file) and cannot clash with other libraries. */
#if defined(__GNUC__)
#define NATIVE_HIDDEN __attribute__((visibility("hidden")))
#else
#define NATIVE_HIDDEN
#endif

/* -- argument helpers (_native.c) -------------------------------------------------- */

NATIVE_HIDDEN char kind_of(const Py_buffer *view);
NATIVE_HIDDEN void release_all(Views *views);
NATIVE_HIDDEN int product_of(const Py_ssize_t *sizes, int count, const char *name,
                             Py_ssize_t *product);
NATIVE_HIDDEN Py_buffer *hold_view(Views *views, PyObject *obj, int writable);
NATIVE_HIDDEN int take(Views *views, PyObject *obj, int writable, char kind,
                       const Py_ssize_t *sizes, int count, const char *name, void **data);
NATIVE_HIDDEN int take_optional(Views *views, PyObject *obj, int writable, char kind,
                                const Py_ssize_t *sizes, int count, const char *name,
                                void **data);
NATIVE_HIDDEN char float_kind(PyObject *obj, const char *name);
NATIVE_HIDDEN int read_geometry(PyObject *shape, Geometry *g);

/* -- calls recorded for run_parts (native_parts.c) ------------------------------------ */

/* A zeroed call struct of `size` bytes (a Task first); NULL with MemoryError. */
NATIVE_HIDDEN void *new_task(size_t size, void (*run)(Task *task));
/* Run the call now (GIL released), or record it into the part being recorded on
 * this thread; either way the task is the callee's: a new reference to None, or
 * NULL with a MemoryError if the call, run now, set out_of_memory. */
NATIVE_HIDDEN PyObject *submit(Task *task);
/* Release the views and free a call that will not run (an argument error). */
NATIVE_HIDDEN void discard(Task *task);
/* RUN_WITHOUT_GIL's: a kernel that cannot record ran while this thread records. */
NATIVE_HIDDEN void note_immediate_run(const char *name);
/* The fork handler of the pool; 0, or -1 if it could not be registered. */
NATIVE_HIDDEN int init_parts(void);

/* -- kernels shared across files --------------------------------------------------- */

/* native_gemm.c: Winograd's 36 GEMMs of a block of tiles ('f' or 'd' buffers) */
NATIVE_HIDDEN void winograd_gemms_of(char kind, const void *u, const void *w, void *m,
                                     Py_ssize_t first, Py_ssize_t tiles, Py_ssize_t c,
                                     Py_ssize_t o, int sums);
/* native_gemm.c: 0 if a vector path is chosen for the GEMMs, else -1 with a
 * ValueError naming the caller (winograd_gemms_of needs one) */
NATIVE_HIDDEN int need_gemm_path(const char *caller);
/* native_gemm.c: the best vector path this CPU runs (the module's load) */
NATIVE_HIDDEN void choose_gemm_path(void);

/* -- entry points of the method table ---------------------------------------------- */

/* native_window.c */
NATIVE_HIDDEN PyObject *py_max_pool(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_max_pool_grad(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_im2col(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_col2im(PyObject *self, PyObject *args);
/* native_winograd.c */
NATIVE_HIDDEN PyObject *py_winograd_input(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_winograd_output(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_winograd_grad_tiles(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_winograd_filter(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_winograd_conv(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_winograd_grad_sums(PyObject *self, PyObject *args);
/* native_gemm.c */
NATIVE_HIDDEN PyObject *py_winograd_gemms(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_gemm(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_gemm_paths(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_gemm_path(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_select_gemm_path(PyObject *self, PyObject *arg);
/* native_batch_norm.c */
NATIVE_HIDDEN PyObject *py_batch_norm_sums(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_batch_norm_apply(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_batch_norm_grad_apply(PyObject *self, PyObject *args);
NATIVE_HIDDEN PyObject *py_batch_norm_pool(PyObject *self, PyObject *args);
/* native_updates.c */
NATIVE_HIDDEN PyObject *py_apply_update(PyObject *self, PyObject *args);
/* native_parts.c */
NATIVE_HIDDEN PyObject *py_run_parts(PyObject *self, PyObject *args);

#endif
