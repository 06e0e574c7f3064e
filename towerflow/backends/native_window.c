/* Pooling and patch kernels (bias + max pool, its gradient, im2col, col2im)
 * and their entry points: see _native.c's overview. The pooling kernels have
 * AVX-512 and AVX2 clones (CPU_CLONES): they compare, select, add and multiply
 * once per value, nothing GCC could contract into an FMA, so every clone gives
 * the baseline's bits. */
#include "native_common.h"

#define DEFINE_KERNELS(T, LANE, SUFFIX)                                                       \
static void add_bias_outside_windows_##SUFFIX(T *x, const T *bias, const Geometry *g) \
{                                                                                       \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
        for (Py_ssize_t row = 0; row < g->h; row++) {                                   \
            Py_ssize_t start = row < g->oh * g->kh ? g->ow * g->kw : 0;                 \
            for (Py_ssize_t col = start; col < g->w; col++) {                           \
                T *p = x + ((img * g->h + row) * g->w + col) * g->c;                    \
                for (Py_ssize_t ch = 0; ch < g->c; ch++)                                \
                    p[ch] += bias[ch];                                                  \
            }                                                                           \
        }                                                                               \
}                                                                                       \
                                                                                        \
/* out = the max of each window (NP_MAX over the taps in row-major order, as     \
 * pool_kernels' _window_max takes them), code = the bits of the taps equal to   \
 * that max, kept up to date tap by tap: a tap equal to the new max sets its     \
 * bit, and the bits so far survive only while the max stays what they matched. \
 * (NaN matches nothing, as x == max is false for NaN in NumPy.) */              \
CPU_CLONES                                                                              \
static void max_pool_##SUFFIX(T *x, const T *bias, T *out, uint8_t *code,             \
                              int relu, const Geometry *g)                              \
{                                                                                       \
    const Py_ssize_t c = g->c;                                                          \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t r = 0; r < g->oh; r++)                                              \
    for (Py_ssize_t q = 0; q < g->ow; q++)                                              \
    for (Py_ssize_t c0 = 0; c0 < c; c0 += BLOCK) {                                     \
        const Py_ssize_t cb = c - c0 < BLOCK ? c - c0 : BLOCK;                          \
        const Py_ssize_t cell = ((img * g->oh + r) * g->ow + q) * c + c0;               \
        T max[BLOCK];                                                                   \
        LANE bits[BLOCK];                                                               \
        int tap = 0;                                                                    \
        for (Py_ssize_t i = 0; i < g->kh; i++)                                          \
        for (Py_ssize_t j = 0; j < g->kw; j++, tap++) {                                 \
            T *p = x + ((img * g->h + r * g->kh + i) * g->w + q * g->kw + j) * c + c0;  \
            const LANE bit = (LANE)1 << tap;                                            \
            if (bias)                                                                   \
                for (Py_ssize_t ch = 0; ch < cb; ch++)                                  \
                    p[ch] += bias[c0 + ch];                                             \
            POOL_TAP(T, p, max, bits, bit, tap, cb)                                   \
        }                                                                               \
        T *o = out + cell;                                                              \
        if (relu)                                                                       \
            for (Py_ssize_t ch = 0; ch < cb; ch++)                                      \
                o[ch] = NP_MAX(max[ch], (T)0);                                          \
        else                                                                            \
            for (Py_ssize_t ch = 0; ch < cb; ch++)                                      \
                o[ch] = max[ch];                                                        \
        if (code)                                                                       \
            for (Py_ssize_t ch = 0; ch < cb; ch++)                                      \
                code[cell + ch] = (uint8_t)bits[ch];                                    \
    }                                                                                   \
    if (bias)                                                                           \
        add_bias_outside_windows_##SUFFIX(x, bias, g);                                  \
}                                                                                       \
                                                                                        \
/* dx: each window's gradient (masked by pooled > 0 when given, multiplying as  \
 * ReluGrad does) at the window's first maximum (the lowest set bit), zeros      \
 * elsewhere, including the cells no window covers. */                            \
CPU_CLONES                                                                              \
static void max_pool_grad_##SUFFIX(const uint8_t *code, const T *grad,                 \
                                   const T *pooled, T *dx, const Geometry *g)           \
{                                                                                       \
    const Py_ssize_t c = g->c;                                                          \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t r = 0; r < g->oh; r++)                                              \
    for (Py_ssize_t q = 0; q < g->ow; q++) {                                            \
        Py_ssize_t cell = (img * g->oh + r) * g->ow + q;                                \
        for (Py_ssize_t c0 = 0; c0 < c; c0 += BLOCK) {                                 \
            const Py_ssize_t cb = c - c0 < BLOCK ? c - c0 : BLOCK;                      \
            const uint8_t *k = code + cell * c + c0;                                    \
            const T *gr = grad + cell * c + c0;                                         \
            LANE first[BLOCK];          /* the lowest set bit: the first maximum */    \
            T value[BLOCK];                                                             \
            for (Py_ssize_t ch = 0; ch < cb; ch++)                                      \
                first[ch] = k[ch] & -(LANE)k[ch];                                       \
            if (pooled) {                                                               \
                const T *pl = pooled + cell * c + c0;                                   \
                for (Py_ssize_t ch = 0; ch < cb; ch++)                                  \
                    value[ch] = gr[ch] * (T)(pl[ch] > 0);                               \
            } else                                                                      \
                for (Py_ssize_t ch = 0; ch < cb; ch++)                                  \
                    value[ch] = gr[ch];                                                 \
            int tap = 0;                                                                \
            for (Py_ssize_t i = 0; i < g->kh; i++)                                      \
            for (Py_ssize_t j = 0; j < g->kw; j++, tap++) {                             \
                T *d = dx + ((img * g->h + r * g->kh + i) * g->w + q * g->kw + j) * c   \
                       + c0;                                                            \
                for (Py_ssize_t ch = 0; ch < cb; ch++)                                  \
                    d[ch] = first[ch] == (LANE)1 << tap ? value[ch] : (T)0;             \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
        for (Py_ssize_t row = 0; row < g->h; row++) {                                   \
            Py_ssize_t start = row < g->oh * g->kh ? g->ow * g->kw : 0;                 \
            T *d = dx + ((img * g->h + row) * g->w + start) * c;                        \
            for (Py_ssize_t e = 0; e < (g->w - start) * c; e++)                         \
                d[e] = (T)0;                                                            \
        }                                                                               \
}

DEFINE_KERNELS(float, int32_t, f32)
DEFINE_KERNELS(double, int64_t, f64)

/* -- im2col ------------------------------------------------------------------------ */

typedef struct {
    Py_ssize_t n, h, w, c;    /* input [N, H, W, C] */
    Py_ssize_t kh, kw, sh, sw, top, left;
    Py_ssize_t oh, ow;        /* patches [N * OH * OW, KH * KW * C] */
} ConvGeometry;

/* The patch matrix of x: row (n, r, q) holds the window at output (r, q),
 * taps row-major, each tap's C channels; zeros where the window reads
 * padding. A window row whose KW taps are all real is one run of KW * C
 * values in x and in the patches. */
#define DEFINE_IM2COL(T, SUFFIX)                                                        \
static void im2col_##SUFFIX(const T *restrict x, T *restrict patches,                  \
                            const ConvGeometry *g)                                      \
{                                                                                       \
    const Py_ssize_t c = g->c, run = g->kw * c;                                         \
    T *row = patches;                                                                   \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t r = 0; r < g->oh; r++)                                              \
    for (Py_ssize_t q = 0; q < g->ow; q++, row += g->kh * run) {                        \
        const Py_ssize_t left = q * g->sw - g->left;                                    \
        for (Py_ssize_t i = 0; i < g->kh; i++) {                                        \
            const Py_ssize_t in_row = r * g->sh - g->top + i;                           \
            T *to = row + i * run;                                                      \
            if (in_row < 0 || in_row >= g->h) {                                         \
                for (Py_ssize_t e = 0; e < run; e++)                                    \
                    to[e] = (T)0;                                                       \
                continue;                                                               \
            }                                                                           \
            const T *line = x + (img * g->h + in_row) * g->w * c;                       \
            if (left >= 0 && left + g->kw <= g->w) {                                    \
                for (Py_ssize_t e = 0; e < run; e++)                                    \
                    to[e] = line[left * c + e];                                         \
                continue;                                                               \
            }                                                                           \
            for (Py_ssize_t j = 0; j < g->kw; j++) {                                    \
                const Py_ssize_t col = left + j;                                        \
                for (Py_ssize_t ch = 0; ch < c; ch++)                                   \
                    to[j * c + ch] = col >= 0 && col < g->w ? line[col * c + ch] : (T)0; \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
}

DEFINE_IM2COL(float, f32)
DEFINE_IM2COL(double, f64)

/* dx (zeroed first) = the sum of every patch row's values at the cells its
 * window read: the adjoint of im2col, each cell's terms added in the order
 * of the patch rows, then of the taps. */
#define DEFINE_COL2IM(T, SUFFIX)                                                        \
static void col2im_##SUFFIX(const T *restrict patches, T *restrict dx,                  \
                            const ConvGeometry *g)                                      \
{                                                                                       \
    const Py_ssize_t c = g->c, run = g->kw * c;                                         \
    for (Py_ssize_t e = 0; e < g->n * g->h * g->w * c; e++)                             \
        dx[e] = (T)0;                                                                   \
    const T *row = patches;                                                             \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t r = 0; r < g->oh; r++)                                              \
    for (Py_ssize_t q = 0; q < g->ow; q++, row += g->kh * run) {                        \
        const Py_ssize_t left = q * g->sw - g->left;                                    \
        for (Py_ssize_t i = 0; i < g->kh; i++) {                                        \
            const Py_ssize_t in_row = r * g->sh - g->top + i;                           \
            if (in_row < 0 || in_row >= g->h)                                           \
                continue;                                                               \
            const T *from = row + i * run;                                              \
            T *line = dx + (img * g->h + in_row) * g->w * c;                            \
            if (left >= 0 && left + g->kw <= g->w) {                                    \
                for (Py_ssize_t e = 0; e < run; e++)                                    \
                    line[left * c + e] += from[e];                                      \
                continue;                                                               \
            }                                                                           \
            for (Py_ssize_t j = 0; j < g->kw; j++) {                                    \
                const Py_ssize_t col = left + j;                                        \
                if (col >= 0 && col < g->w)                                             \
                    for (Py_ssize_t ch = 0; ch < c; ch++)                               \
                        line[col * c + ch] += from[j * c + ch];                         \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
}

DEFINE_COL2IM(float, f32)
DEFINE_COL2IM(double, f64)

/* max_pool and max_pool_grad record under run_parts (native_parts.c). */

typedef struct {
    Task task;
    char kind;
    int relu;
    void *x, *bias, *out, *code;
    Geometry g;
} MaxPoolCall;

static void run_max_pool(Task *task)
{
    MaxPoolCall *c = (MaxPoolCall *)task;
    BY_KIND(c->kind, max_pool, c->x, c->bias, c->out, c->code, c->relu, &c->g);
}

PyObject *py_max_pool(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *bias_obj, *out_obj, *code_obj;
    int relu;
    Geometry g;
    if (!PyArg_ParseTuple(args, "O!OOOOp:max_pool", &PyTuple_Type, &shape, &x_obj,
                          &bias_obj, &out_obj, &code_obj, &relu)
        || read_geometry(shape, &g) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    MaxPoolCall *call = new_task(sizeof *call, run_max_pool);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, x_obj, bias_obj != Py_None, kind, SIZES(g.n, g.h, g.w, g.c), "x",
             &call->x) < 0
        || take_optional(views, bias_obj, 0, kind, SIZES(g.c), "bias", &call->bias) < 0
        || take(views, out_obj, 1, kind, SIZES(g.n, g.oh, g.ow, g.c), "out", &call->out) < 0
        || take_optional(views, code_obj, 1, 'B', SIZES(g.n, g.oh, g.ow, g.c), "code",
                &call->code) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->relu = relu;
    call->g = g;
    return submit(&call->task);
}

typedef struct {
    Task task;
    char kind;
    void *code, *grad, *pooled, *dx;
    Geometry g;
} MaxPoolGradCall;

static void run_max_pool_grad(Task *task)
{
    MaxPoolGradCall *c = (MaxPoolGradCall *)task;
    BY_KIND(c->kind, max_pool_grad, c->code, c->grad, c->pooled, c->dx, &c->g);
}

PyObject *py_max_pool_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *code_obj, *grad_obj, *pooled_obj, *dx_obj;
    Geometry g;
    if (!PyArg_ParseTuple(args, "O!OOOO:max_pool_grad", &PyTuple_Type, &shape, &code_obj,
                          &grad_obj, &pooled_obj, &dx_obj)
        || read_geometry(shape, &g) < 0)
        return NULL;
    char kind = float_kind(dx_obj, "dx");
    if (!kind)
        return NULL;
    MaxPoolGradCall *call = new_task(sizeof *call, run_max_pool_grad);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, code_obj, 0, 'B', SIZES(g.n, g.oh, g.ow, g.c), "code", &call->code) < 0
        || take(views, grad_obj, 0, kind, SIZES(g.n, g.oh, g.ow, g.c), "grad",
                &call->grad) < 0
        || take_optional(views, pooled_obj, 0, kind, SIZES(g.n, g.oh, g.ow, g.c), "pooled",
                &call->pooled) < 0
        || take(views, dx_obj, 1, kind, SIZES(g.n, g.h, g.w, g.c), "dx", &call->dx) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->g = g;
    return submit(&call->task);
}

typedef struct {
    Task task;
    char kind;
    int forward;
    void *x, *patches;
    ConvGeometry g;
} PatchesCall;

static void run_convert_patches(Task *task)
{
    PatchesCall *c = (PatchesCall *)task;
    if (c->forward)
        BY_KIND(c->kind, im2col, c->x, c->patches, &c->g);
    else
        BY_KIND(c->kind, col2im, c->patches, c->x, &c->g);
}

/* im2col (forward) or col2im (not forward): the two directions between an
 * NHWC image array and its patch matrix. Both record under run_parts. */
static PyObject *convert_patches(PyObject *args, int forward)
{
    PyObject *shape, *x_obj, *patches_obj;
    ConvGeometry g;
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &shape, &x_obj, &patches_obj)
        || !PyArg_ParseTuple(shape, "nnnnnnnnnnnn", &g.n, &g.h, &g.w, &g.c, &g.kh, &g.kw,
                             &g.sh, &g.sw, &g.top, &g.left, &g.oh, &g.ow))
        return NULL;
    if (g.n < 0 || g.h < 0 || g.w < 0 || g.c < 0 || g.kh < 1 || g.kw < 1 || g.sh < 1
        || g.sw < 1 || g.top < 0 || g.left < 0 || g.oh < 0 || g.ow < 0) {
        PyErr_SetString(PyExc_ValueError, "geometry (n, h, w, c, kh, kw, sh, sw, top, left, "
                        "oh, ow): sizes must be >= 0, window and strides >= 1");
        return NULL;
    }
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    PatchesCall *call = new_task(sizeof *call, run_convert_patches);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, x_obj, !forward, kind, SIZES(g.n, g.h, g.w, g.c), "x", &call->x) < 0
        || take(views, patches_obj, forward, kind, SIZES(g.n, g.oh, g.ow, g.kh, g.kw, g.c),
                "patches", &call->patches) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->forward = forward;
    call->g = g;
    return submit(&call->task);
}

PyObject *py_im2col(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_patches(args, 1);
}

PyObject *py_col2im(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_patches(args, 0);
}
