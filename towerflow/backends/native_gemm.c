/* The GEMMs' entry points and the choice of vector path: the kernels themselves are
 * native_gemm_tiles.h, compiled once per path (native_gemm_avx512.c,
 * native_gemm_avx2.c; see native_gemm.h). The CPU's best path is chosen when the
 * module loads; select_gemm_path forces another (TOWERFLOW_ISA, through native.py),
 * before any GEMM runs. Where the CPU has neither path (a plain x86-64, or a build
 * for another architecture) no path is chosen and native.py leaves every GEMM to
 * NumPy: the kernels' vectors, split by the compiler into pieces there, ran 40x
 * slower than OpenBLAS. */
#include "native_gemm.h"

#include <pthread.h>
#include <stdlib.h>

/* -- the vector paths ------------------------------------------------------------------ */

/* The paths compiled here, best first. */
static const GemmKernels *const gemm_paths[] = {&gemm_kernels_avx512, &gemm_kernels_avx2};
#define GEMM_PATH_COUNT ((int)(sizeof gemm_paths / sizeof gemm_paths[0]))

/* The path every GEMM runs on; NULL: none (the entry points refuse). */
static const GemmKernels *gemm_kernels;

/* Whether this CPU (and its operating system) runs a path's instructions. */
static int cpu_runs(const GemmKernels *path)
{
    if (!path->name)
        return 0;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (path == &gemm_kernels_avx512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* The module's load: the best path the CPU runs. */
void choose_gemm_path(void)
{
    gemm_kernels = NULL;
    for (int i = 0; i < GEMM_PATH_COUNT && !gemm_kernels; i++)
        if (cpu_runs(gemm_paths[i]))
            gemm_kernels = gemm_paths[i];
}

/* gemm_paths(): the names of the paths this CPU runs, best first (empty: none). */
PyObject *py_gemm_paths(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    PyObject *names = PyList_New(0);
    for (int i = 0; names && i < GEMM_PATH_COUNT; i++) {
        if (!cpu_runs(gemm_paths[i]))
            continue;
        PyObject *name = PyUnicode_FromString(gemm_paths[i]->name);
        if (!name || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            Py_CLEAR(names);
            break;
        }
        Py_DECREF(name);
    }
    if (!names)
        return NULL;
    PyObject *paths = PyList_AsTuple(names);
    Py_DECREF(names);
    return paths;
}

/* select_gemm_path(name): every GEMM runs on that path from now on (one of
 * gemm_paths()), or on none with None; returns the path's name, or None. Call it
 * before any GEMM runs (native.py does, at import): the bits of a product depend on
 * the path. */
PyObject *py_select_gemm_path(PyObject *self, PyObject *arg)
{
    (void)self;
    if (arg == Py_None) {
        gemm_kernels = NULL;
        Py_RETURN_NONE;
    }
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!name) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "select_gemm_path: expected a str or None");
        return NULL;
    }
    for (int i = 0; i < GEMM_PATH_COUNT; i++)
        if (gemm_paths[i]->name && strcmp(gemm_paths[i]->name, name) == 0) {
            if (!cpu_runs(gemm_paths[i])) {
                PyErr_Format(PyExc_ValueError, "select_gemm_path: this CPU cannot run "
                             "the %s path", name);
                return NULL;
            }
            gemm_kernels = gemm_paths[i];
            return PyUnicode_FromString(name);
        }
    PyErr_Format(PyExc_ValueError, "select_gemm_path: %R is no vector path (expected "
                 "'avx512' or 'avx2')", arg);
    return NULL;
}

/* gemm_path(): the name of the path GEMMs run on, or None. */
PyObject *py_gemm_path(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    if (!gemm_kernels)
        Py_RETURN_NONE;
    return PyUnicode_FromString(gemm_kernels->name);
}

/* A ValueError unless a path is chosen: 0 with one, -1 without. */
int need_gemm_path(const char *caller)
{
    if (gemm_kernels)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: no vector path (the CPU has neither AVX-512 nor "
                 "AVX2 with FMA, or none is selected): leave GEMMs to NumPy", caller);
    return -1;
}

/* -- packing buffers -------------------------------------------------------------------- */

/* A thread's packing buffers, kept between calls (the pool's threads live on):
 * malloc's fresh mmaps faulted in their pages on every call. Freed when the
 * thread ends (a thread-specific key's destructor), so short-lived threads leak
 * nothing. */
typedef struct {
    void *data;
    size_t bytes;
} PackingBuffer;

static pthread_key_t packing_key;
static pthread_once_t packing_key_once = PTHREAD_ONCE_INIT;
static int packing_key_made;

static void free_packing_buffer(void *held)
{
    PackingBuffer *buffer = held;
    free(buffer->data);
    free(buffer);
}

static void make_packing_key(void)
{
    packing_key_made = pthread_key_create(&packing_key, free_packing_buffer) == 0;
}

/* This thread's buffer of at least `bytes` (64-byte aligned); NULL if none. */
void *gemm_packing_buffer(size_t bytes)
{
    pthread_once(&packing_key_once, make_packing_key);
    if (!packing_key_made)
        return NULL;
    PackingBuffer *buffer = pthread_getspecific(packing_key);
    if (!buffer) {
        buffer = calloc(1, sizeof *buffer);
        if (!buffer || pthread_setspecific(packing_key, buffer) != 0) {
            free(buffer);
            return NULL;
        }
    }
    if (bytes > buffer->bytes) {
        free(buffer->data);
        buffer->data = aligned_alloc(64, (bytes + 63) / 64 * 64);
        buffer->bytes = buffer->data ? bytes : 0;
    }
    return buffer->data;
}

/* The 36 GEMMs for native_winograd.c's loops over blocks of images (kind 'f' or
 * 'd'; the GIL already released; its entry points checked the path). */
void winograd_gemms_of(char kind, const void *u, const void *w, void *m, Py_ssize_t first,
                       Py_ssize_t tiles, Py_ssize_t c, Py_ssize_t o, int sums)
{
    if (kind == 'f')
        gemm_kernels->winograd_gemms_f32(u, w, m, first, tiles, c, o, sums);
    else
        gemm_kernels->winograd_gemms_f64(u, w, m, first, tiles, c, o, sums);
}

/* -- entry points ------------------------------------------------------------------------ */

/* winograd_gemms((plane_tiles, first, tiles, c, o, sums), u, w, m): see
 * winograd_gemms_f32. */
PyObject *py_winograd_gemms(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *u_obj, *w_obj, *m_obj;
    Py_ssize_t plane_tiles, first, tiles, c, o;
    int sums;
    if (!PyArg_ParseTuple(args, "O!OOO:winograd_gemms", &PyTuple_Type, &shape, &u_obj,
                          &w_obj, &m_obj)
        || !PyArg_ParseTuple(shape, "nnnnnp", &plane_tiles, &first, &tiles, &c, &o, &sums))
        return NULL;
    if (plane_tiles < 0 || first < 0 || tiles < 0 || c < 0 || o < 0
        || first > plane_tiles - tiles) {
        PyErr_SetString(PyExc_ValueError,
                        "geometry (plane_tiles, first, tiles, c, o, sums): sizes must be "
                        ">= 0 and the block's tiles within a plane");
        return NULL;
    }
    char kind = float_kind(u_obj, "u");
    if (!kind || need_gemm_path("winograd_gemms") < 0)
        return NULL;
    Views views = {.held = 0};
    void *u, *w, *m;
    if (take(&views, u_obj, 0, kind, SIZES(plane_tiles, 36, c), "u", &u) < 0
        || take(&views, w_obj, 0, kind, SIZES(sums ? tiles : 36, sums ? 36 : c, o), "w", &w) < 0
        || take(&views, m_obj, 1, kind, SIZES(sums ? 36 : tiles, sums ? c : 36, o), "m",
                &m) < 0) {
        release_all(&views);
        return NULL;
    }
    if (o % (kind == 'f' ? 16 : 8)) {
        release_all(&views);
        PyErr_Format(PyExc_ValueError, "winograd_gemms: %zd output channels, not a multiple "
                     "of the vector's %d items", o, kind == 'f' ? 16 : 8);
        return NULL;
    }
    note_immediate_run("winograd_gemms");
    Py_BEGIN_ALLOW_THREADS
    winograd_gemms_of(kind, u, w, m, first, tiles, c, o, sums);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

static int read_gemm_geometry(PyObject *shape, GemmGeometry *g)
{
    if (!PyArg_ParseTuple(shape, "nnnppnnnn", &g->m, &g->k, &g->n, &g->transpose_a,
                          &g->transpose_b, &g->first_row, &g->rows, &g->first_column,
                          &g->columns))
        return -1;
    if (g->m < 0 || g->k < 0 || g->n < 0 || g->first_row < 0 || g->rows < 0
        || g->first_row > g->m - g->rows || g->first_column < 0 || g->columns < 0
        || g->first_column > g->n - g->columns) {
        PyErr_SetString(PyExc_ValueError,
                        "geometry (m, k, n, transpose_a, transpose_b, first_row, rows, "
                        "first_column, columns): sizes must be >= 0 and the block within "
                        "the [m, n] product");
        return -1;
    }
    return 0;
}

typedef struct {
    Task task;
    char kind;
    const GemmKernels *path;   /* the path when the call was made */
    void *a, *b, *c;
    GemmGeometry g;
} GemmCall;

static void run_gemm(Task *task)
{
    GemmCall *call = (GemmCall *)task;
    const int status = (call->kind == 'f' ? call->path->gemm_f32 : call->path->gemm_f64)(
        &call->g, call->a, call->b, call->c);
    if (status < 0)
        task->out_of_memory = "gemm: no memory for the packed operands";
}

/* gemm(geometry, a, b, c): the block of c = op(a) @ op(b) that the geometry names
 * (see GemmGeometry); the rest of c is left as it was. Records under run_parts. */
PyObject *py_gemm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *a_obj, *b_obj, *c_obj;
    GemmGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOO:gemm", &PyTuple_Type, &shape, &a_obj, &b_obj, &c_obj)
        || read_gemm_geometry(shape, &g) < 0)
        return NULL;
    char kind = float_kind(a_obj, "a");
    if (!kind || need_gemm_path("gemm") < 0)
        return NULL;
    GemmCall *call = new_task(sizeof *call, run_gemm);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, a_obj, 0, kind, SIZES(g.m, g.k), "a", &call->a) < 0
        || take(views, b_obj, 0, kind, SIZES(g.k, g.n), "b", &call->b) < 0
        || take(views, c_obj, 1, kind, SIZES(g.m, g.n), "c", &call->c) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->path = gemm_kernels;
    call->g = g;
    return submit(&call->task);
}
