/* Compiled window kernels for the NumPy backend (see native.py).
 *
 * NumPy runs max pooling as a dozen whole-array passes (a maximum per tap,
 * an equality and an add per tap for the winner bits, the ReLU), each one
 * streaming the block through memory again, and im2col / col2im as strided
 * copies and adds tap by tap. These loops make one pass over each window
 * instead, with the GIL released so that the CPU pool's threads run them side
 * by side. Pooling computes exactly what pool_kernels.py computes, bit for
 * bit, including NaN propagation, for windows that tile the input (ksize ==
 * strides, no padding) with at most 8 taps (uint8 winner bits); im2col and
 * col2im take any window, stride and padding. native.py sends everything
 * else to NumPy.
 *
 * Arrays arrive as C-contiguous buffers (the buffer protocol: no NumPy
 * headers are needed to build this); native.py checks shapes and dtypes,
 * and each function here checks every buffer's size again before writing.
 */
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
 * one at load time (GCC's target_clones): one build runs everywhere. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_CLONES
#endif

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

/* -- Winograd F(4x4, 3x3) ------------------------------------------------------------ */

/* A stride-1 3x3 convolution in tiles of 4x4 outputs (Lavin and Gray, "Fast
 * Algorithms for Convolutional Neural Networks", 2015): each tile's 6x6 input
 * window d becomes U = B^T d B, the filter g becomes V = G g G^T, and the
 * tile's outputs are A^T (U * V) A, where the 36 products U * V summed over
 * the input channels are 36 GEMMs [tiles, C] @ [C, O] (NumPy runs those).
 * 36 multiplies per 16 outputs instead of 144: a quarter of im2col's GEMM.
 * The transforms below add and scale only (B and A have small integer
 * entries); V is made in NumPy (nn_kernels.py). Rounding: float32 results
 * differ from the direct sum by about 1e-6 of the largest output. */

typedef struct {
    Py_ssize_t n, h, w, c;    /* input [N, H, W, C] */
    Py_ssize_t top, left;     /* output (r, q) reads input rows r - top .. r - top + 2 */
    Py_ssize_t oh, ow;        /* output [N, OH, OW, *] */
    Py_ssize_t first_tile;    /* where these images' tiles start in each of the 36 planes */
    Py_ssize_t plane_tiles;   /* tiles per plane of the transformed array */
} WinogradGeometry;

#define TILES_OF(size) ((size) / 4 + ((size) % 4 != 0))   /* no overflow near the max */

/* r = B^T d along one axis, channel by channel: d and r are 6 vectors of cb. */
#define B_T(T, d, r, cb)                                                                \
    for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                          \
        const T d0 = d(0), d1 = d(1), d2 = d(2), d3 = d(3), d4 = d(4), d5 = d(5);        \
        r(0) = 4 * d0 - 5 * d2 + d4;                                                    \
        r(1) = d3 + d4 - 4 * (d1 + d2);                                                 \
        r(2) = 4 * (d1 - d2) + d4 - d3;                                                 \
        r(3) = 2 * (d3 - d1) + d4 - d2;                                                 \
        r(4) = 2 * (d1 - d3) + d4 - d2;                                                 \
        r(5) = 4 * d1 - 5 * d3 + d5;                                                    \
    }

/* y = A^T m along one axis: m is 6 vectors of cb, y 4. */
#define A_T(T, m, y, cb)                                                                \
    for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                          \
        const T m0 = m(0), m1 = m(1), m2 = m(2), m3 = m(3), m4 = m(4), m5 = m(5);        \
        const T sum12 = m1 + m2, diff12 = m1 - m2, sum34 = m3 + m4, diff34 = m3 - m4;   \
        y(0) = m0 + sum12 + sum34;                                                      \
        y(1) = diff12 + 2 * diff34;                                                     \
        y(2) = sum12 + 4 * sum34;                                                       \
        y(3) = diff12 + 8 * diff34 + m5;                                                \
    }

/* t = A e along one axis: e is 4 vectors of cb, t 6. */
#define A_(T, e, t, cb)                                                                 \
    for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                          \
        const T e0 = e(0), e1 = e(1), e2 = e(2), e3 = e(3);                             \
        const T sum02 = e0 + e2, sum13 = e1 + e3, four02 = e0 + 4 * e2;                 \
        const T two13 = 2 * e1 + 8 * e3;                                                \
        t(0) = e0;                                                                      \
        t(1) = sum02 + sum13;                                                           \
        t(2) = sum02 - sum13;                                                           \
        t(3) = four02 + two13;                                                          \
        t(4) = four02 - two13;                                                          \
        t(5) = e3;                                                                      \
    }

#define DEFINE_WINOGRAD(T, SUFFIX)                                                      \
/* tile[size][size][BLOCK] = the size x size cells from (row0, col0) on of one          \
 * [height, width, c] image (image: its channel c0), cb channels each; zeros            \
 * for cells outside the image. */                                                      \
static void load_tile_##SUFFIX(const T *restrict image, Py_ssize_t height,              \
                               Py_ssize_t width, Py_ssize_t c, Py_ssize_t row0,         \
                               Py_ssize_t col0, int size, Py_ssize_t cb,                \
                               T *restrict tile)                                        \
{                                                                                       \
    for (int i = 0; i < size; i++)                                                      \
        for (int j = 0; j < size; j++) {                                                \
            const Py_ssize_t row = row0 + i, col = col0 + j;                            \
            T *cell = tile + (i * size + j) * BLOCK;                                    \
            if (row < 0 || row >= height || col < 0 || col >= width) {                  \
                for (Py_ssize_t ch = 0; ch < cb; ch++)                                  \
                    cell[ch] = (T)0;                                                    \
                continue;                                                               \
            }                                                                           \
            const T *p = image + (row * width + col) * c;                               \
            for (Py_ssize_t ch = 0; ch < cb; ch++)                                      \
                cell[ch] = p[ch];                                                       \
        }                                                                               \
}                                                                                       \
                                                                                        \
/* u[plane_tiles, 36, C] from tile first_tile on = B^T d B of every tile's 6x6          \
 * input window (zeros outside the input), the 36 terms row-major. */                   \
CPU_CLONES static void winograd_input_##SUFFIX(const T *restrict x, T *restrict u,                 \
                                    const WinogradGeometry *g)                          \
{                                                                                       \
    const Py_ssize_t c = g->c, th = TILES_OF(g->oh), tw = TILES_OF(g->ow);              \
    const Py_ssize_t plane = c;         /* from one term to the next */                 \
    u += g->first_tile * 36 * c;                                                        \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t ty = 0; ty < th; ty++)                                              \
    for (Py_ssize_t tx = 0; tx < tw; tx++)                                              \
    for (Py_ssize_t c0 = 0; c0 < c; c0 += BLOCK) {                                     \
        const Py_ssize_t cb = c - c0 < BLOCK ? c - c0 : BLOCK;                          \
        const Py_ssize_t tile = (img * th + ty) * tw + tx;                              \
        T d[6][6][BLOCK], t[6][6][BLOCK];                                               \
        const Py_ssize_t row0 = ty * 4 - g->top, col0 = tx * 4 - g->left;               \
        const T *image = x + img * g->h * g->w * c + c0;                                \
        if (row0 >= 0 && col0 >= 0 && row0 + 6 <= g->h && col0 + 6 <= g->w) {          \
            /* inside the image: read the window in place, no copy */                   \
            const T *window = image + (row0 * g->w + col0) * c;                         \
            const Py_ssize_t image_w = g->w;                                            \
            for (int j = 0; j < 6; j++) {                                               \
                _Pragma("GCC ivdep")                                                    \
                B_T(T, X_COL, T_COL, cb)                                                \
            }                                                                           \
        } else {                                                                        \
            load_tile_##SUFFIX(image, g->h, g->w, c, row0, col0, 6, cb, &d[0][0][0]);   \
            for (int j = 0; j < 6; j++) {                                               \
                _Pragma("GCC ivdep")                                                    \
                B_T(T, D_COL, T_COL, cb)                                                \
            }                                                                           \
        }                                                                               \
        for (int i = 0; i < 6; i++) {                                                   \
            T *out = u + tile * 36 * c + (i * 6) * plane + c0;                          \
            _Pragma("GCC ivdep")                                                        \
            B_T(T, T_ROW, U_ROW, cb)                                                    \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* v[N * TH * TW, 36, O] = A e A^T of every 4x4 tile e of the output gradient           \
 * (zeros past its edge): the filter gradient of a tile is G^T [(A e A^T) *             \
 * (B^T d B)] G, the forward pass's transpose. */                                       \
CPU_CLONES static void winograd_grad_tiles_##SUFFIX(const T *restrict grad, T *restrict v,         \
                                         const WinogradGeometry *g)                     \
{                                                                                       \
    const Py_ssize_t o = g->c, th = TILES_OF(g->oh), tw = TILES_OF(g->ow);              \
    const Py_ssize_t plane = o;         /* from one term to the next */                 \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t ty = 0; ty < th; ty++)                                              \
    for (Py_ssize_t tx = 0; tx < tw; tx++)                                              \
    for (Py_ssize_t c0 = 0; c0 < o; c0 += BLOCK) {                                      \
        const Py_ssize_t cb = o - c0 < BLOCK ? o - c0 : BLOCK;                          \
        const Py_ssize_t tile = (img * th + ty) * tw + tx;                              \
        T e[4][4][BLOCK], t[6][4][BLOCK];                                               \
        load_tile_##SUFFIX(grad + img * g->oh * g->ow * o + c0, g->oh, g->ow, o,        \
                           ty * 4, tx * 4, 4, cb, &e[0][0][0]);                         \
        for (int j = 0; j < 4; j++) {                                                   \
            _Pragma("GCC ivdep")                                                        \
            A_(T, E_COL, TE_COL, cb)                                                    \
        }                                                                               \
        for (int i = 0; i < 6; i++) {                                                   \
            T *out = v + tile * 36 * o + (i * 6) * plane + c0;                          \
            _Pragma("GCC ivdep")                                                        \
            A_(T, TE_ROW, U_ROW, cb)                                                    \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* y[N, OH, OW, O] = A^T m A of every tile, m[N * TH * TW, 36, O] (the GEMMs'   \
 * output); a tile's rows and columns past the output's edge are dropped. */       \
CPU_CLONES static void winograd_output_##SUFFIX(const T *restrict m, T *restrict y,                \
                                     const WinogradGeometry *g)                         \
{                                                                                       \
    const Py_ssize_t o = g->c, th = TILES_OF(g->oh), tw = TILES_OF(g->ow);              \
    const Py_ssize_t plane = o;         /* from one term to the next */                 \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t ty = 0; ty < th; ty++)                                              \
    for (Py_ssize_t tx = 0; tx < tw; tx++)                                              \
    for (Py_ssize_t c0 = 0; c0 < o; c0 += BLOCK) {                                     \
        const Py_ssize_t cb = o - c0 < BLOCK ? o - c0 : BLOCK;                          \
        const Py_ssize_t tile = (img * th + ty) * tw + tx;                              \
        T t[4][6][BLOCK], r[4][4][BLOCK];                                               \
        for (int j = 0; j < 6; j++) {                                                   \
            const T *in = m + tile * 36 * o + j * plane + c0;                           \
            _Pragma("GCC ivdep")                                                        \
            A_T(T, M_COL, TM_COL, cb)                                                   \
        }                                                                               \
        for (int i = 0; i < 4; i++) {                                                   \
            _Pragma("GCC ivdep")                                                        \
            A_T(T, TM_ROW, R_ROW, cb)                                                   \
        }                                                                               \
        for (int i = 0; i < 4 && ty * 4 + i < g->oh; i++)                               \
            for (int j = 0; j < 4 && tx * 4 + j < g->ow; j++) {                         \
                T *p = y + ((img * g->oh + ty * 4 + i) * g->ow + tx * 4 + j) * o + c0;  \
                for (Py_ssize_t ch = 0; ch < cb; ch++)                                  \
                    p[ch] = r[i][j][ch];                                                \
            }                                                                           \
    }                                                                                   \
}

/* Accessors for B_T and A_T: the transform runs down the columns of a tile
 * (over i at a fixed j), then along the rows (over j at a fixed i). */
#define D_COL(k) d[k][j][ch]
#define X_COL(k) window[((k) * image_w + j) * c + ch]
#define T_COL(k) t[k][j][ch]
#define T_ROW(k) t[i][k][ch]
#define U_ROW(k) out[(k) * plane + ch]
#define M_COL(k) in[((k) * 6) * plane + ch]
#define TM_COL(k) t[k][j][ch]
#define TM_ROW(k) t[i][k][ch]
#define R_ROW(k) r[i][k][ch]
#define E_COL(k) e[k][j][ch]
#define TE_COL(k) t[k][j][ch]
#define TE_ROW(k) t[i][k][ch]

DEFINE_WINOGRAD(float, f32)
DEFINE_WINOGRAD(double, f64)

/* -- Winograd's 36 GEMMs -------------------------------------------------------------- */

/* The term-by-term products of Winograd (m[t] = u[t] @ v[t] for the 36 terms t,
 * and the filter gradient's sums u[t]^T @ e[t]) are GEMMs with short inner
 * dimensions (32 to 128 channels): OpenBLAS reaches about half of a core's
 * float32 peak on them, through NumPy's stacked matmul. A register-blocked
 * kernel (ROWS rows of a times two vectors of b's columns held in registers,
 * rank-1 updates along p) reaches 160-190 GFLOP/s on one AVX-512 core. The
 * function is compiled for AVX-512, AVX2 and plain x86-64; the CPU picks at
 * load time (GCC's target_clones), so one build runs everywhere. The sum
 * over p runs in the same order for every element and call: results are
 * the same bits run after run and on any thread. */

#define GEMM_ROWS 6

#define STORE_ONE(vec, out, value)                                                      \
    do {                                                                                \
        vec value_ = (value);                                                           \
        if (accumulate) {                                                               \
            vec old_;                                                                   \
            memcpy(&old_, (out), sizeof old_);                                          \
            value_ += old_;                                                             \
        }                                                                               \
        memcpy((out), &value_, sizeof value_);                                          \
    } while (0)
#define STORE_ONE_f32(out, value) STORE_ONE(vec_f32, out, value)
#define STORE_ONE_f64(out, value) STORE_ONE(vec_f64, out, value)
#define STORE_f32(out, low, high)                                                       \
    do { STORE_ONE_f32(out, low); STORE_ONE_f32((out) + 16, high); } while (0)
#define STORE_f64(out, low, high)                                                       \
    do { STORE_ONE_f64(out, low); STORE_ONE_f64((out) + 8, high); } while (0)

/* n, the columns, a multiple of LANES (the wrappers refuse other widths: a
 * scalar loop for the last few columns ran at a tenth of OpenBLAS's speed).
 * c(i, j) = sum_p a(i, p) b(p, j) (with accumulate: c(i, j) += that sum), i < m,
 * j < n, a(i, p) = a[i * a_row + p * a_col], b(p, j) = b[p * b_row + j],
 * c(i, j) = c[i * c_row + j]; a vector holds LANES items. */
#define DEFINE_GEMM(T, SUFFIX, LANES)                                                    \
typedef T vec_##SUFFIX __attribute__((vector_size((LANES) * sizeof(T)), aligned(sizeof(T)))); \
                                                                                        \
CPU_CLONES                                                                              \
static void gemm_##SUFFIX(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,      \
                          const T *restrict b, Py_ssize_t b_row, T *restrict c,         \
                          Py_ssize_t c_row, Py_ssize_t m, Py_ssize_t k, Py_ssize_t n,   \
                          int accumulate)                                               \
{                                                                                       \
    const Py_ssize_t wide = 2 * (LANES);                                                \
    Py_ssize_t j = 0;                                                                   \
    for (; j + wide <= n; j += wide) {                                                  \
        Py_ssize_t i = 0;                                                               \
        for (; i + GEMM_ROWS <= m; i += GEMM_ROWS) {                                    \
            vec_##SUFFIX acc[GEMM_ROWS][2];                                             \
            memset(acc, 0, sizeof acc);                                                 \
            for (Py_ssize_t p = 0; p < k; p++) {                                        \
                vec_##SUFFIX b0, b1;                                                    \
                memcpy(&b0, b + p * b_row + j, sizeof b0);                                  \
                memcpy(&b1, b + p * b_row + j + (LANES), sizeof b1);                        \
                for (int r = 0; r < GEMM_ROWS; r++) {                                   \
                    const T s = a[(i + r) * a_row + p * a_col];                         \
                    acc[r][0] += s * b0;                                                \
                    acc[r][1] += s * b1;                                                \
                }                                                                       \
            }                                                                           \
            for (int r = 0; r < GEMM_ROWS; r++)                                         \
                STORE_##SUFFIX(c + (i + r) * c_row + j, acc[r][0], acc[r][1]);              \
        }                                                                               \
        for (; i < m; i++) {                                                            \
            vec_##SUFFIX acc0 = {0}, acc1 = {0};                                        \
            for (Py_ssize_t p = 0; p < k; p++) {                                        \
                const T s = a[i * a_row + p * a_col];                                   \
                vec_##SUFFIX b0, b1;                                                    \
                memcpy(&b0, b + p * b_row + j, sizeof b0);                                  \
                memcpy(&b1, b + p * b_row + j + (LANES), sizeof b1);                        \
                acc0 += s * b0;                                                         \
                acc1 += s * b1;                                                         \
            }                                                                           \
            STORE_##SUFFIX(c + i * c_row + j, acc0, acc1);                                  \
        }                                                                               \
    }                                                                                   \
    for (; j + (LANES) <= n; j += (LANES)) {     /* one vector of columns */           \
        Py_ssize_t i = 0;                                                               \
        for (; i + GEMM_ROWS <= m; i += GEMM_ROWS) {                                    \
            vec_##SUFFIX acc[GEMM_ROWS];                                                \
            memset(acc, 0, sizeof acc);                                                 \
            for (Py_ssize_t p = 0; p < k; p++) {                                        \
                vec_##SUFFIX b0;                                                        \
                memcpy(&b0, b + p * b_row + j, sizeof b0);                                  \
                for (int r = 0; r < GEMM_ROWS; r++)                                     \
                    acc[r] += a[(i + r) * a_row + p * a_col] * b0;                      \
            }                                                                           \
            for (int r = 0; r < GEMM_ROWS; r++)                                         \
                STORE_ONE_##SUFFIX(c + (i + r) * c_row + j, acc[r]);                        \
        }                                                                               \
        for (; i < m; i++) {                                                            \
            vec_##SUFFIX acc0 = {0};                                                    \
            for (Py_ssize_t p = 0; p < k; p++) {                                        \
                vec_##SUFFIX b0;                                                        \
                memcpy(&b0, b + p * b_row + j, sizeof b0);                                  \
                acc0 += a[i * a_row + p * a_col] * b0;                                  \
            }                                                                           \
            STORE_ONE_##SUFFIX(c + i * c_row + j, acc0);                                    \
        }                                                                               \
    }                                                                                   \
}

DEFINE_GEMM(float, f32, 16)
DEFINE_GEMM(double, f64, 8)

/* The 36 GEMMs of one block of tiles: u holds [plane_tiles, 36, C] transformed
 * inputs, the block its tiles first .. first + tiles - 1 (a block small enough
 * to stay in cache: a term's rows are 36 * C apart).
 * sums 0: m[tiles, 36, O], m[:, t] = u_block[:, t] @ w[t], w [36, C, O] (the
 * forward pass); sums 1: m[36, C, O], m[t] += u_block[:, t]^T @ w[:, t], w
 * [tiles, 36, O] (the filter gradient's sums, added block after block). */
#define DEFINE_WINOGRAD_GEMMS(T, SUFFIX)                                                 \
static void winograd_gemms_##SUFFIX(const T *u, const T *w, T *m, Py_ssize_t first,      \
                                    Py_ssize_t tiles, Py_ssize_t c, Py_ssize_t o,       \
                                    int sums)                                           \
{                                                                                       \
    for (int t = 0; t < 36; t++) {                                                      \
        const T *block = u + (first * 36 + t) * c;                                      \
        if (sums)                                                                       \
            gemm_##SUFFIX(block, 1, 36 * c, w + t * o, 36 * o, m + t * c * o, o,        \
                          c, tiles, o, 1);                                              \
        else                                                                            \
            gemm_##SUFFIX(block, 36 * c, 1, w + t * c * o, o, m + t * o, 36 * o,        \
                          tiles, c, o, 0);                                              \
    }                                                                                   \
}

DEFINE_WINOGRAD_GEMMS(float, f32)
DEFINE_WINOGRAD_GEMMS(double, f64)

/* -- the blocked GEMM (MatMul and its gradients; see native.gemm) ---------------------- */

/* gemm_##SUFFIX above streams b's rows straight from memory and runs each dot
 * product over the whole inner dimension: fast where that dimension is short,
 * but on deep ones (a dense layer's 3,136 inputs) b's rows leave the caches
 * before they are used again, and rows 4 KiB apart (1,024 float32 columns) all
 * fall into one L1 set. This one is blocked the way GotoBLAS / BLIS are: the
 * inner dimension in blocks of BLOCK_K, b packed block by block into panels of
 * 2 vectors of columns (BLOCK_K rows, contiguous: no aliasing, prefetch friendly,
 * and a transposed b costs nothing more), a packed into panels of GEMM_ROWS rows
 * (BLOCK_M rows at a time), and the same 6 x 2-vector register tile as gemm above.
 * Panels are padded with zeros, so any width and height is taken; an edge tile
 * is computed into a local tile and its valid part copied. Every element's sum
 * runs over the blocks of p in order, p in order within a block: the bits do not
 * depend on the thread or on how the caller splits rows or columns. */

/* BLOCK_K: one b panel (BLOCK_K x 32 float32 = 32 KiB) stays in a 48 KiB L1 while
 * it meets every a panel. BLOCK_M: the packed a block (BLOCK_M x BLOCK_K float32,
 * 144 KiB) stays in the 1 MiB L2. BLOCK_N: the packed b block (1 MiB float32)
 * stays in L2/L3 while the a blocks pass. Measured: see benchmarks/dense_gemm.py. */
#ifndef BLOCK_K
#define BLOCK_K 256
#endif
#ifndef BLOCK_M
#define BLOCK_M 144
#endif
#ifndef BLOCK_N
#define BLOCK_N 1024
#endif
/* Packed b panels are 32 KiB (a multiple of 4 KiB) long: the same row of 32 panels,
 * written one after another while packing, fell into one L1 set. This many more
 * items between panels spreads them over the sets (measured: packing 2.6x faster). */
#ifndef PANEL_PAD
#define PANEL_PAD 16
#endif

/* A thread's packing buffers, kept between calls (the pool's threads live on):
 * malloc's fresh mmaps faulted in their pages on every call. Freed when the
 * thread ends (a thread-specific key's destructor), so short-lived threads leak
 * nothing. */
#include <pthread.h>

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
static void *packing_buffer(size_t bytes)
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

#define DEFINE_BLOCKED_GEMM(T, SUFFIX, LANES, INDEX)                                     \
typedef INDEX index_##SUFFIX __attribute__((vector_size((LANES) * sizeof(INDEX))));      \
                                                                                        \
/* ap[panel][p][r] = a(i0 + panel * GEMM_ROWS + r, p0 + p), zeros past row m; a     \
 * transposed a (a_row 1) is read along its rows, the others along p. */              \
static inline __attribute__((always_inline)) void                                      \
pack_a_##SUFFIX(const T *a, Py_ssize_t a_row, Py_ssize_t a_col, Py_ssize_t rows,        \
                Py_ssize_t kc, T *restrict ap)                                          \
{                                                                                       \
    for (Py_ssize_t i = 0; i < rows; i += GEMM_ROWS, ap += GEMM_ROWS * kc) {            \
        const Py_ssize_t valid = rows - i < GEMM_ROWS ? rows - i : GEMM_ROWS;           \
        if (a_row == 1 && valid == GEMM_ROWS)                                           \
            for (Py_ssize_t p = 0; p < kc; p++)                                         \
                memcpy(ap + p * GEMM_ROWS, a + i + p * a_col, GEMM_ROWS * sizeof(T));   \
        else                                                                            \
            for (int r = 0; r < GEMM_ROWS; r++)                                         \
                for (Py_ssize_t p = 0; p < kc; p++)                                     \
                    ap[p * GEMM_ROWS + r] = r < valid ? a[(i + r) * a_row + p * a_col] : 0; \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* The LANES x LANES block of vectors r transposed in place: for h = LANES / 2 .. 1,  \
 * the off-diagonal h x h blocks of every 2h x 2h block swap places (2 shuffles per  \
 * pair of rows: 4 x 16 two-vector shuffles for float32 instead of 256 scalar stores, \
 * which held a transposed b's packing to 1 item per cycle). */                       \
static inline __attribute__((always_inline)) void                                      \
transpose_##SUFFIX(vec_##SUFFIX r[LANES])                                               \
{                                                                                       \
    _Pragma("GCC unroll 4")                                                             \
    for (int h = (LANES) / 2; h >= 1; h /= 2) {                                         \
        index_##SUFFIX low, high;                                                       \
        _Pragma("GCC unroll 16")                                                        \
        for (int c = 0; c < (LANES); c++) {                                             \
            low[c] = (c & h) ? (LANES) + c - h : c;                                     \
            high[c] = (c & h) ? (LANES) + c : c + h;                                    \
        }                                                                               \
        _Pragma("GCC unroll 16")                                                        \
        for (int i = 0; i < (LANES); i++)                                               \
            if (!(i & h)) {                                                             \
                const vec_##SUFFIX x = r[i], y = r[i + h];                              \
                r[i] = __builtin_shuffle(x, y, low);                                    \
                r[i + h] = __builtin_shuffle(x, y, high);                               \
            }                                                                           \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* The panel bp[p][v] = b[(j + v) * b_col + p] of a transposed b: LANES x LANES       \
 * blocks read as vectors along p, transposed in registers, stored along v. */         \
static inline __attribute__((always_inline)) void                                      \
pack_transposed_panel_##SUFFIX(const T *b, Py_ssize_t b_col, Py_ssize_t kc,             \
                               T *restrict bp)                                          \
{                                                                                       \
    const Py_ssize_t wide = 2 * (LANES), whole = kc / (LANES) * (LANES);                \
    for (Py_ssize_t v0 = 0; v0 < wide; v0 += (LANES))                                   \
        for (Py_ssize_t p0 = 0; p0 < whole; p0 += (LANES)) {                            \
            vec_##SUFFIX r[LANES];                                                      \
            _Pragma("GCC unroll 16")                                                    \
            for (int v = 0; v < (LANES); v++)                                           \
                memcpy(&r[v], b + (v0 + v) * b_col + p0, sizeof r[v]);                 \
            transpose_##SUFFIX(r);                                                      \
            _Pragma("GCC unroll 16")                                                    \
            for (int p = 0; p < (LANES); p++)                                           \
                memcpy(bp + (p0 + p) * wide + v0, &r[p], sizeof r[p]);                 \
        }                                                                               \
    for (Py_ssize_t p = whole; p < kc; p++)                                             \
        for (Py_ssize_t v = 0; v < wide; v++)                                           \
            bp[p * wide + v] = b[v * b_col + p];                                        \
}                                                                                       \
                                                                                        \
/* bp[panel][p][v] = b(p0 + p, j0 + panel * 2 * LANES + v), zeros past column n.      \
 * b read along its rows (one stream: panel by panel, rows 4 KiB apart took a TLB    \
 * miss each); a transposed b panel by panel. */                                       \
static inline __attribute__((always_inline)) void                                      \
pack_b_##SUFFIX(const T *b, Py_ssize_t b_row, Py_ssize_t b_col, Py_ssize_t kc,          \
                Py_ssize_t columns, T *restrict bp)                                     \
{                                                                                       \
    const Py_ssize_t wide = 2 * (LANES), whole = columns / wide * wide;                 \
    const Py_ssize_t panel = wide * kc + PANEL_PAD;                                     \
    if (b_col == 1)                                                                     \
        for (Py_ssize_t p = 0; p < kc; p++)                                             \
            for (Py_ssize_t j = 0; j < whole; j += wide)                                \
                memcpy(bp + j / wide * panel + p * wide, b + p * b_row + j,             \
                       wide * sizeof(T));                                               \
    else                                                                                \
        for (Py_ssize_t j = 0; j < whole; j += wide)                                    \
            pack_transposed_panel_##SUFFIX(b + j * b_col, b_col, kc, bp + j / wide * panel); \
    if (whole < columns)                                                                \
        for (Py_ssize_t p = 0; p < kc; p++)                                             \
            for (Py_ssize_t v = 0; v < wide; v++)                                       \
                bp[whole / wide * panel + p * wide + v] =                               \
                    whole + v < columns ? b[p * b_row + (whole + v) * b_col] : 0;       \
}                                                                                       \
                                                                                        \
/* c[r * c_row + v] (+)= sum_p ap[p][r] * bp[p][v], r < GEMM_ROWS, v < 2 * LANES. */    \
static inline __attribute__((always_inline)) void                                      \
tile_##SUFFIX(Py_ssize_t kc, const T *restrict ap, const T *restrict bp,                \
              T *restrict c, Py_ssize_t c_row, int accumulate)                          \
{                                                                                       \
    vec_##SUFFIX acc[GEMM_ROWS][2];                                                     \
    memset(acc, 0, sizeof acc);                                                         \
    for (Py_ssize_t p = 0; p < kc; p++, ap += GEMM_ROWS, bp += 2 * (LANES)) {           \
        vec_##SUFFIX b0, b1;                                                            \
        memcpy(&b0, bp, sizeof b0);                                                     \
        memcpy(&b1, bp + (LANES), sizeof b1);                                           \
        for (int r = 0; r < GEMM_ROWS; r++) {                                           \
            acc[r][0] += ap[r] * b0;                                                    \
            acc[r][1] += ap[r] * b1;                                                    \
        }                                                                               \
    }                                                                                   \
    for (int r = 0; r < GEMM_ROWS; r++)                                                 \
        STORE_##SUFFIX(c + r * c_row, acc[r][0], acc[r][1]);                            \
}                                                                                       \
                                                                                        \
/* The tile at c, of rows x columns valid items (at most GEMM_ROWS x 2 * LANES). */     \
static inline __attribute__((always_inline)) void                                      \
edge_tile_##SUFFIX(Py_ssize_t kc, const T *ap, const T *bp, T *c, Py_ssize_t c_row,     \
                   Py_ssize_t rows, Py_ssize_t columns, int accumulate)                 \
{                                                                                       \
    if (rows == GEMM_ROWS && columns == 2 * (LANES)) {                                  \
        tile_##SUFFIX(kc, ap, bp, c, c_row, accumulate);                                \
        return;                                                                         \
    }                                                                                   \
    T local[GEMM_ROWS * 2 * (LANES)];                                                   \
    tile_##SUFFIX(kc, ap, bp, local, 2 * (LANES), 0);                                   \
    for (Py_ssize_t r = 0; r < rows; r++)                                               \
        for (Py_ssize_t v = 0; v < columns; v++)                                        \
            c[r * c_row + v] = (accumulate ? c[r * c_row + v] : 0)                      \
                               + local[r * 2 * (LANES) + v];                            \
}                                                                                       \
                                                                                        \
/* c[m, n] (row stride c_row) = a @ b, a(i, p) = a[i * a_row + p * a_col], b(p, j) =    \
 * b[p * b_row + j * b_col]; 0 on success, -1 when the packing buffer is refused. */    \
CPU_CLONES                                                                              \
static int blocked_gemm_##SUFFIX(const T *a, Py_ssize_t a_row, Py_ssize_t a_col,        \
                                 const T *b, Py_ssize_t b_row, Py_ssize_t b_col,        \
                                 T *c, Py_ssize_t c_row,                                \
                                 Py_ssize_t m, Py_ssize_t k, Py_ssize_t n)              \
{                                                                                       \
    const Py_ssize_t wide = 2 * (LANES);                                                \
    const Py_ssize_t b_panel = (BLOCK_K * wide + PANEL_PAD) * ((BLOCK_N + wide - 1) / wide); \
    T *bp = packing_buffer((b_panel + BLOCK_K * (BLOCK_M + GEMM_ROWS)) * sizeof(T));    \
    if (!bp)                                                                            \
        return -1;                                                                      \
    T *ap = bp + b_panel;                                                               \
    if (k == 0)                                                                         \
        for (Py_ssize_t i = 0; i < m; i++)                                              \
            memset(c + i * c_row, 0, n * sizeof(T));                                    \
    for (Py_ssize_t j0 = 0; j0 < n; j0 += BLOCK_N) {                                    \
        const Py_ssize_t nc = n - j0 < BLOCK_N ? n - j0 : BLOCK_N;                      \
        for (Py_ssize_t p0 = 0; p0 < k; p0 += BLOCK_K) {                                \
            const Py_ssize_t kc = k - p0 < BLOCK_K ? k - p0 : BLOCK_K;                  \
            pack_b_##SUFFIX(b + p0 * b_row + j0 * b_col, b_row, b_col, kc, nc, bp);     \
            for (Py_ssize_t i0 = 0; i0 < m; i0 += BLOCK_M) {                            \
                const Py_ssize_t mc = m - i0 < BLOCK_M ? m - i0 : BLOCK_M;              \
                pack_a_##SUFFIX(a + i0 * a_row + p0 * a_col, a_row, a_col, mc, kc, ap); \
                for (Py_ssize_t j = 0; j < nc; j += wide)                               \
                    for (Py_ssize_t i = 0; i < mc; i += GEMM_ROWS)                      \
                        edge_tile_##SUFFIX(kc, ap + i * kc,                             \
                                           bp + j / wide * (wide * kc + PANEL_PAD),     \
                                           c + (i0 + i) * c_row + j0 + j, c_row,        \
                                           mc - i < GEMM_ROWS ? mc - i : GEMM_ROWS,     \
                                           nc - j < wide ? nc - j : wide, p0 > 0);      \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    return 0;                                                                           \
}

DEFINE_BLOCKED_GEMM(float, f32, 16, int32_t)
DEFINE_BLOCKED_GEMM(double, f64, 8, int64_t)

/* -- argument handling ---------------------------------------------------------- */

/* 'f' (float32), 'd' (float64) or 'B' (uint8) for a buffer's format, else 0. */
static char kind_of(const Py_buffer *view)
{
    const char *format = view->format ? view->format : "B";
    if (*format == '@' || *format == '=' || *format == '<')
        format++;
    if (format[0] && !format[1] && (format[0] == 'f' || format[0] == 'd' || format[0] == 'B'))
        return format[0];
    return 0;
}

/* Views of the arguments, released together by release_all. */
typedef struct {
    Py_buffer views[4];
    int held;
} Views;

static void release_all(Views *views)
{
    for (int i = 0; i < views->held; i++)
        PyBuffer_Release(&views->views[i]);
    views->held = 0;
}

/* The product of `count` sizes into *product; -1 with a ValueError naming `name`
 * when a size is negative or the product does not fit a Py_ssize_t (a wrapped
 * product could match a small buffer and let a kernel read past it). */
static int product_of(const Py_ssize_t *sizes, int count, const char *name,
                      Py_ssize_t *product)
{
    Py_ssize_t result = 1;
    for (int i = 0; i < count; i++) {
        if (sizes[i] < 0 || (sizes[i] > 0 && result > PY_SSIZE_T_MAX / sizes[i])) {
            PyErr_Format(PyExc_ValueError, "%s: the geometry's sizes (a negative one, or a "
                         "product past %zd) do not describe a buffer", name, PY_SSIZE_T_MAX);
            return -1;
        }
        result *= sizes[i];
    }
    *product = result;
    return 0;
}

/* The sizes whose product is a buffer's item count: SIZES(n, h, w, c). */
#define SIZES(...) (const Py_ssize_t[]){__VA_ARGS__}, \
    (int)(sizeof((const Py_ssize_t[]){__VA_ARGS__}) / sizeof(Py_ssize_t))

/* A C-contiguous view of obj (NULL for None) holding prod(sizes) items of `kind`. */
static int take(Views *views, PyObject *obj, int writable, char kind,
                const Py_ssize_t *sizes, int count, const char *name, void **data)
{
    *data = NULL;
    if (obj == Py_None)
        return 0;
    Py_ssize_t elements;
    if (product_of(sizes, count, name, &elements) < 0)
        return -1;
    Py_buffer *view = &views->views[views->held];
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    views->held++;
    if (kind_of(view) != kind || view->itemsize < 1
        || elements > PY_SSIZE_T_MAX / view->itemsize
        || view->len != elements * view->itemsize) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected %zd items of kind '%c', got %zd bytes of format '%s'",
                     name, elements, kind, view->len, view->format ? view->format : "B");
        return -1;
    }
    *data = view->buf;
    return 0;
}

/* 'f' or 'd' for a float32 or float64 buffer; 0 with an error set otherwise. */
static char float_kind(PyObject *obj, const char *name)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT) < 0)
        return 0;
    char kind = kind_of(&view);
    PyBuffer_Release(&view);
    if (kind != 'f' && kind != 'd') {
        PyErr_Format(PyExc_ValueError, "%s: expected float32 or float64", name);
        return 0;
    }
    return kind;
}

static int read_geometry(PyObject *shape, Geometry *g)
{
    if (!PyArg_ParseTuple(shape, "nnnnnnnn", &g->n, &g->h, &g->w, &g->c,
                          &g->kh, &g->kw, &g->oh, &g->ow))
        return -1;
    /* NOTE: compared by division, never by a product that could overflow */
    if (g->n < 0 || g->h < 0 || g->w < 0 || g->c < 0 || g->kh < 1 || g->kw < 1
        || g->kh > 8 || g->kw > 8 / g->kh || g->oh < 0 || g->ow < 0
        || g->oh > g->h / g->kh || g->ow > g->w / g->kw) {
        PyErr_SetString(PyExc_ValueError,
                        "geometry (n, h, w, c, kh, kw, oh, ow): windows must tile the input "
                        "with at most 8 taps");
        return -1;
    }
    return 0;
}

/* == training-mode batch norm (native_batch_norm.py) ================================== */

/* Training-mode FusedBatchNorm and FusedBatchNormGrad on [rows, C] arrays, in
 * two passes each: batch_norm_sums adds per-channel sums over blocks of rows
 * (one pair of partial sums per block, in double, so the caller adds the
 * blocks in a fixed order and gets the same bits whatever thread ran which
 * block), and batch_norm_apply / batch_norm_grad_apply write the output from
 * per-channel coefficients. No full-size temporaries.
 *
 * Forward sums: of d = x - shift and d * d (shift: a sample of each channel,
 * so the variance E[d^2] - E[d]^2 does not cancel the way it would for a
 * large mean). Gradient sums: of g and g * (x - mean), g being the gradient
 * masked by relu_output > 0 (ReluGrad's product) when relu_output is given. */

/* NOTE: without this GCC keeps every loop that masks by a comparison scalar (a
 * comparison with NaN could raise FE_INVALID, which we never read); the values
 * computed are the same. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

typedef struct {
    Py_ssize_t rows, channels, block_rows, first, stop;   /* blocks [first, stop) */
} SumsGeometry;

typedef struct {
    Py_ssize_t rows, channels, first, stop;               /* rows [first, stop) */
} ApplyGeometry;

/* AVX2 where the CPU has it (chosen when the module loads); no FMA, so each
 * clone rounds exactly as the baseline one does: the same bits on any x86. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define WIDE_LOOPS __attribute__((target_clones("avx2", "default")))
#else
#define WIDE_LOOPS
#endif

#define DEFINE_BATCH_NORM(T, SUFFIX)                                                    \
WIDE_LOOPS static void batch_norm_sums_##SUFFIX(const T *x, const T *shift,             \
                                                const T *grad, const T *relu,           \
                                                double *partials, const SumsGeometry *g) \
{                                                                                       \
    const Py_ssize_t c = g->channels;                                                   \
    for (Py_ssize_t block = g->first; block < g->stop; block++) {                       \
        double *restrict first = partials + block * 2 * c, *restrict second = first + c; \
        for (Py_ssize_t ch = 0; ch < c; ch++)                                           \
            first[ch] = second[ch] = 0.0;                                               \
        const Py_ssize_t start = block * g->block_rows;                                 \
        const Py_ssize_t end = start + g->block_rows < g->rows ? start + g->block_rows  \
                                                                : g->rows;              \
        for (Py_ssize_t row = start; row < end; row++) {                                \
            const T *restrict xr = x + row * c;                                         \
            if (!grad)                                                                  \
                for (Py_ssize_t ch = 0; ch < c; ch++) {                                 \
                    const double d = (double)xr[ch] - (double)shift[ch];                \
                    first[ch] += d;                                                     \
                    second[ch] += d * d;                                                \
                }                                                                       \
            else if (!relu)                                                             \
                for (Py_ssize_t ch = 0; ch < c; ch++) {                                 \
                    const double gv = grad[row * c + ch];                               \
                    first[ch] += gv;                                                    \
                    second[ch] += gv * ((double)xr[ch] - (double)shift[ch]);            \
                }                                                                       \
            else                                                                        \
                for (Py_ssize_t ch = 0; ch < c; ch++) {                                 \
                    const double gv = grad[row * c + ch] * (T)(relu[row * c + ch] > 0); \
                    first[ch] += gv;                                                    \
                    second[ch] += gv * ((double)xr[ch] - (double)shift[ch]);            \
                }                                                                       \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* y = (x - mean) * gain + offset, then max(y, 0) (NaN kept) if relu;               \
 * coefficients [3, C]: mean, gain, offset. */                                      \
WIDE_LOOPS static void batch_norm_apply_##SUFFIX(const T *x, const T *coefficients,     \
                                                 T *y, int relu, const ApplyGeometry *g) \
{                                                                                       \
    const Py_ssize_t c = g->channels;                                                   \
    const T *mean = coefficients, *gain = mean + c, *offset = gain + c;                 \
    for (Py_ssize_t row = g->first; row < g->stop; row++) {                             \
        const T *restrict xr = x + row * c;                                             \
        T *restrict yr = y + row * c;                                                   \
        if (relu)                                                                       \
            for (Py_ssize_t ch = 0; ch < c; ch++) {                                     \
                const T v = (xr[ch] - mean[ch]) * gain[ch] + offset[ch];                \
                yr[ch] = NP_MAX(v, (T)0);                                               \
            }                                                                           \
        else                                                                            \
            for (Py_ssize_t ch = 0; ch < c; ch++)                                       \
                yr[ch] = (xr[ch] - mean[ch]) * gain[ch] + offset[ch];                   \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* dx = (g * gain + (x - mean) * k_centered) - k_mean, g masked by relu > 0 when      \
 * relu is given; coefficients [4, C]: mean, gain, k_centered, k_mean. */             \
WIDE_LOOPS static void batch_norm_grad_apply_##SUFFIX(const T *grad, const T *relu,    \
                                                      const T *x, const T *coefficients, \
                                                      T *dx, const ApplyGeometry *g)    \
{                                                                                       \
    const Py_ssize_t c = g->channels;                                                   \
    const T *mean = coefficients, *gain = mean + c, *k_centered = gain + c;             \
    const T *k_mean = k_centered + c;                                                   \
    for (Py_ssize_t row = g->first; row < g->stop; row++) {                             \
        const T *restrict xr = x + row * c, *restrict gr = grad + row * c;              \
        T *restrict dr = dx + row * c;                                                  \
        if (relu) {                                                                     \
            const T *restrict rr = relu + row * c;                                      \
            for (Py_ssize_t ch = 0; ch < c; ch++) {                                     \
                const T gv = gr[ch] * (T)(rr[ch] > 0);                                  \
                dr[ch] = (gv * gain[ch] + (xr[ch] - mean[ch]) * k_centered[ch])         \
                         - k_mean[ch];                                                  \
            }                                                                           \
        } else                                                                          \
            for (Py_ssize_t ch = 0; ch < c; ch++)                                       \
                dr[ch] = (gr[ch] * gain[ch] + (xr[ch] - mean[ch]) * k_centered[ch])     \
                         - k_mean[ch];                                                  \
    }                                                                                   \
}

DEFINE_BATCH_NORM(float, f32)
DEFINE_BATCH_NORM(double, f64)

/* out = MaxPool of relu((x - mean) * gain + offset) over windows that tile x,
 * code = the winner bits: what batch_norm_apply with relu then max_pool give,
 * bit for bit (the same expressions, taps in the same order), without writing
 * the full-size output. */
#define DEFINE_BATCH_NORM_POOL(T, LANE, SUFFIX)                                         \
WIDE_LOOPS static void batch_norm_pool_##SUFFIX(const T *x, const T *coefficients,      \
                                                T *out, uint8_t *code, const Geometry *g) \
{                                                                                       \
    const Py_ssize_t c = g->c;                                                          \
    const T *mean = coefficients, *gain = mean + c, *offset = gain + c;                 \
    for (Py_ssize_t img = 0; img < g->n; img++)                                         \
    for (Py_ssize_t r = 0; r < g->oh; r++)                                              \
    for (Py_ssize_t q = 0; q < g->ow; q++)                                              \
    for (Py_ssize_t c0 = 0; c0 < c; c0 += BLOCK) {                                     \
        const Py_ssize_t cb = c - c0 < BLOCK ? c - c0 : BLOCK;                          \
        const Py_ssize_t cell = ((img * g->oh + r) * g->ow + q) * c + c0;               \
        T max[BLOCK], v[BLOCK];                                                         \
        LANE bits[BLOCK];                                                               \
        int tap = 0;                                                                    \
        for (Py_ssize_t i = 0; i < g->kh; i++)                                          \
        for (Py_ssize_t j = 0; j < g->kw; j++, tap++) {                                 \
            const T *p = x + ((img * g->h + r * g->kh + i) * g->w + q * g->kw + j) * c + c0; \
            const LANE bit = (LANE)1 << tap;                                            \
            for (Py_ssize_t ch = 0; ch < cb; ch++) {                                    \
                const T z = (p[ch] - mean[c0 + ch]) * gain[c0 + ch] + offset[c0 + ch];  \
                v[ch] = NP_MAX(z, (T)0);                                                \
            }                                                                           \
            POOL_TAP(T, v, max, bits, bit, tap, cb)                                   \
        }                                                                               \
        for (Py_ssize_t ch = 0; ch < cb; ch++) {                                        \
            out[cell + ch] = max[ch];                                                   \
            code[cell + ch] = (uint8_t)bits[ch];                                        \
        }                                                                               \
    }                                                                                   \
}

DEFINE_BATCH_NORM_POOL(float, int32_t, f32)
DEFINE_BATCH_NORM_POOL(double, int64_t, f64)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

static int read_rows(PyObject *shape, Py_ssize_t *rows, Py_ssize_t *channels,
                     Py_ssize_t *first, Py_ssize_t *stop, Py_ssize_t *block_rows)
{
    int ok = block_rows
        ? PyArg_ParseTuple(shape, "nnnnn", rows, channels, block_rows, first, stop)
        : PyArg_ParseTuple(shape, "nnnn", rows, channels, first, stop);
    if (!ok)
        return -1;
    Py_ssize_t count = block_rows ? (*block_rows > 0 ? (*rows + *block_rows - 1)
                                     / *block_rows : -1) : *rows;
    if (*rows < 0 || *channels < 0 || count < 0 || *first < 0 || *first > *stop
        || *stop > count) {
        PyErr_SetString(PyExc_ValueError, block_rows
                        ? "geometry (rows, channels, block_rows, first, stop): blocks "
                          "[first, stop) of the rows' ceil(rows / block_rows) blocks"
                        : "geometry (rows, channels, first, stop): rows [first, stop) "
                          "within the rows");
        return -1;
    }
    return 0;
}

static PyObject *py_batch_norm_sums(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *shift_obj, *grad_obj, *relu_obj, *partials_obj;
    SumsGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOOOO:batch_norm_sums", &PyTuple_Type, &shape, &x_obj,
                          &shift_obj, &grad_obj, &relu_obj, &partials_obj)
        || read_rows(shape, &g.rows, &g.channels, &g.first, &g.stop, &g.block_rows) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    if (grad_obj == Py_None && relu_obj != Py_None) {
        PyErr_SetString(PyExc_ValueError, "relu_output: expected None without a grad");
        return NULL;
    }
    Py_ssize_t blocks = g.block_rows ? (g.rows + g.block_rows - 1) / g.block_rows : 0;
    Views inputs = {.held = 0}, outputs = {.held = 0};
    void *x, *shift, *grad, *relu, *partials;
    if (take(&inputs, x_obj, 0, kind, SIZES(g.rows, g.channels), "x", &x) < 0
        || take(&inputs, shift_obj, 0, kind, SIZES(g.channels), "shift", &shift) < 0
        || take(&inputs, grad_obj, 0, kind, SIZES(g.rows, g.channels), "grad", &grad) < 0
        || take(&inputs, relu_obj, 0, kind, SIZES(g.rows, g.channels), "relu_output",
                &relu) < 0
        || take(&outputs, partials_obj, 1, 'd', SIZES(blocks, 2, g.channels), "partials",
                &partials) < 0) {
        release_all(&inputs);
        release_all(&outputs);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        batch_norm_sums_f32(x, shift, grad, relu, partials, &g);
    else
        batch_norm_sums_f64(x, shift, grad, relu, partials, &g);
    Py_END_ALLOW_THREADS
    release_all(&inputs);
    release_all(&outputs);
    Py_RETURN_NONE;
}

static PyObject *py_batch_norm_apply(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *coefficients_obj, *y_obj;
    int relu;
    ApplyGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOOp:batch_norm_apply", &PyTuple_Type, &shape, &x_obj,
                          &coefficients_obj, &y_obj, &relu)
        || read_rows(shape, &g.rows, &g.channels, &g.first, &g.stop, NULL) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *x, *coefficients, *y;
    if (take(&views, x_obj, 0, kind, SIZES(g.rows, g.channels), "x", &x) < 0
        || take(&views, coefficients_obj, 0, kind, SIZES(3, g.channels), "coefficients",
                &coefficients) < 0
        || take(&views, y_obj, 1, kind, SIZES(g.rows, g.channels), "y", &y) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        batch_norm_apply_f32(x, coefficients, y, relu, &g);
    else
        batch_norm_apply_f64(x, coefficients, y, relu, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

static PyObject *py_batch_norm_grad_apply(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *grad_obj, *relu_obj, *x_obj, *coefficients_obj, *dx_obj;
    ApplyGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOOOO:batch_norm_grad_apply", &PyTuple_Type, &shape,
                          &grad_obj, &relu_obj, &x_obj, &coefficients_obj, &dx_obj)
        || read_rows(shape, &g.rows, &g.channels, &g.first, &g.stop, NULL) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    Views inputs = {.held = 0}, outputs = {.held = 0};
    void *grad, *relu, *x, *coefficients, *dx;
    if (take(&inputs, grad_obj, 0, kind, SIZES(g.rows, g.channels), "grad", &grad) < 0
        || take(&inputs, relu_obj, 0, kind, SIZES(g.rows, g.channels), "relu_output",
                &relu) < 0
        || take(&inputs, x_obj, 0, kind, SIZES(g.rows, g.channels), "x", &x) < 0
        || take(&inputs, coefficients_obj, 0, kind, SIZES(4, g.channels), "coefficients",
                &coefficients) < 0
        || take(&outputs, dx_obj, 1, kind, SIZES(g.rows, g.channels), "dx", &dx) < 0) {
        release_all(&inputs);
        release_all(&outputs);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        batch_norm_grad_apply_f32(grad, relu, x, coefficients, dx, &g);
    else
        batch_norm_grad_apply_f64(grad, relu, x, coefficients, dx, &g);
    Py_END_ALLOW_THREADS
    release_all(&inputs);
    release_all(&outputs);
    Py_RETURN_NONE;
}

static PyObject *py_batch_norm_pool(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *coefficients_obj, *out_obj, *code_obj;
    Geometry g;
    if (!PyArg_ParseTuple(args, "O!OOOO:batch_norm_pool", &PyTuple_Type, &shape, &x_obj,
                          &coefficients_obj, &out_obj, &code_obj)
        || read_geometry(shape, &g) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *x, *coefficients, *out, *code;
    if (take(&views, x_obj, 0, kind, SIZES(g.n, g.h, g.w, g.c), "x", &x) < 0
        || take(&views, coefficients_obj, 0, kind, SIZES(3, g.c), "coefficients",
                &coefficients) < 0
        || take(&views, out_obj, 1, kind, SIZES(g.n, g.oh, g.ow, g.c), "out", &out) < 0
        || take(&views, code_obj, 1, 'B', SIZES(g.n, g.oh, g.ow, g.c), "code", &code) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        batch_norm_pool_f32(x, coefficients, out, code, &g);
    else
        batch_norm_pool_f64(x, coefficients, out, code, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

/* == end of training-mode batch norm ============================================= */

static PyObject *py_max_pool(PyObject *self, PyObject *args)
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
    Views views = {.held = 0};
    void *x, *bias, *out, *code;
    if (take(&views, x_obj, bias_obj != Py_None, kind, SIZES(g.n, g.h, g.w, g.c), "x", &x) < 0
        || take(&views, bias_obj, 0, kind, SIZES(g.c), "bias", &bias) < 0
        || take(&views, out_obj, 1, kind, SIZES(g.n, g.oh, g.ow, g.c), "out", &out) < 0
        || take(&views, code_obj, 1, 'B', SIZES(g.n, g.oh, g.ow, g.c), "code", &code) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        max_pool_f32(x, bias, out, code, relu, &g);
    else
        max_pool_f64(x, bias, out, code, relu, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

static PyObject *py_max_pool_grad(PyObject *self, PyObject *args)
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
    Views views = {.held = 0};
    void *code, *grad, *pooled, *dx;
    if (take(&views, code_obj, 0, 'B', SIZES(g.n, g.oh, g.ow, g.c), "code", &code) < 0
        || take(&views, grad_obj, 0, kind, SIZES(g.n, g.oh, g.ow, g.c), "grad", &grad) < 0
        || take(&views, pooled_obj, 0, kind, SIZES(g.n, g.oh, g.ow, g.c), "pooled",
                &pooled) < 0
        || take(&views, dx_obj, 1, kind, SIZES(g.n, g.h, g.w, g.c), "dx", &dx) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        max_pool_grad_f32(code, grad, pooled, dx, &g);
    else
        max_pool_grad_f64(code, grad, pooled, dx, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

/* im2col (forward) or col2im (not forward): the two directions between an
 * NHWC image array and its patch matrix. */
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
    Views views = {.held = 0};
    void *x, *patches;
    if (take(&views, x_obj, !forward, kind, SIZES(g.n, g.h, g.w, g.c), "x", &x) < 0
        || take(&views, patches_obj, forward, kind, SIZES(g.n, g.oh, g.ow, g.kh, g.kw, g.c),
                "patches", &patches) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (forward && kind == 'f')
        im2col_f32(x, patches, &g);
    else if (forward)
        im2col_f64(x, patches, &g);
    else if (kind == 'f')
        col2im_f32(patches, x, &g);
    else
        col2im_f64(patches, x, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

static PyObject *py_im2col(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_patches(args, 1);
}

static PyObject *py_col2im(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_patches(args, 0);
}

static PyObject *py_winograd_input(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *u_obj;
    WinogradGeometry g;
    if (!PyArg_ParseTuple(args, "O!OO:winograd_input", &PyTuple_Type, &shape, &x_obj, &u_obj)
        || !PyArg_ParseTuple(shape, "nnnnnnnnnn", &g.n, &g.h, &g.w, &g.c, &g.top, &g.left,
                             &g.oh, &g.ow, &g.first_tile, &g.plane_tiles))
        return NULL;
    Py_ssize_t tiles = 0;
    if (g.n < 0 || g.h < 0 || g.w < 0 || g.c < 0 || g.top < 0 || g.left < 0 || g.oh < 0
        || g.ow < 0 || g.first_tile < 0 || g.plane_tiles < 0
        || product_of(SIZES(g.n, TILES_OF(g.oh), TILES_OF(g.ow)), "tiles", &tiles) < 0
        || g.first_tile > g.plane_tiles - tiles) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "geometry (n, h, w, c, top, left, oh, ow, first_tile, plane_tiles): "
                        "sizes must be >= 0 and the images' tiles within a plane");
        return NULL;
    }
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *x, *u;
    if (take(&views, x_obj, 0, kind, SIZES(g.n, g.h, g.w, g.c), "x", &x) < 0
        || take(&views, u_obj, 1, kind, SIZES(g.plane_tiles, 36, g.c), "u", &u) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        winograd_input_f32(x, u, &g);
    else
        winograd_input_f64(x, u, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

/* Between the 4x4 tiles of an [N, OH, OW, O] array y and their transformed
 * [tiles, 36, O] m: A^T m A into y (to_tiles 0), A y A^T into m (1). */
static PyObject *convert_output_tiles(PyObject *args, int to_tiles)
{
    PyObject *shape, *m_obj, *y_obj;
    WinogradGeometry g = {0};
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &shape, &m_obj, &y_obj)
        || !PyArg_ParseTuple(shape, "nnnn", &g.n, &g.oh, &g.ow, &g.c))
        return NULL;
    if (g.n < 0 || g.oh < 0 || g.ow < 0 || g.c < 0) {
        PyErr_SetString(PyExc_ValueError, "geometry (n, oh, ow, o): sizes must be >= 0");
        return NULL;
    }
    char kind = float_kind(y_obj, "y");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *m, *y;
    if (take(&views, m_obj, to_tiles, kind,
             SIZES(g.n, TILES_OF(g.oh), TILES_OF(g.ow), 36, g.c), "m", &m) < 0
        || take(&views, y_obj, !to_tiles, kind, SIZES(g.n, g.oh, g.ow, g.c), "y", &y) < 0) {
        release_all(&views);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (to_tiles && kind == 'f')
        winograd_grad_tiles_f32(y, m, &g);
    else if (to_tiles)
        winograd_grad_tiles_f64(y, m, &g);
    else if (kind == 'f')
        winograd_output_f32(m, y, &g);
    else
        winograd_output_f64(m, y, &g);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

static PyObject *py_winograd_output(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_output_tiles(args, 0);
}

static PyObject *py_winograd_grad_tiles(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_output_tiles(args, 1);
}

/* winograd_gemms((plane_tiles, first, tiles, c, o, sums), u, w, m): see
 * winograd_gemms_f32. */
static PyObject *py_winograd_gemms(PyObject *self, PyObject *args)
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
    if (!kind)
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
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        winograd_gemms_f32(u, w, m, first, tiles, c, o, sums);
    else
        winograd_gemms_f64(u, w, m, first, tiles, c, o, sums);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

/* gemm_##SUFFIX's unpacked loops beat the blocked kernel (by 1.2-1.8x, see
 * benchmarks/dense_gemm.py) on the convolutions' narrow products: up to 4 vectors of
 * columns (64 float32) and b small enough to stay in half the 1 MiB L2 (its rows are
 * read once per 6 rows of a): there packing a costs more than it saves. With a 1 MiB
 * b (a 320 x 4096^T @ 4096 x 64 filter gradient) the blocked kernel won, 178 to 143
 * GFLOP/s. */
#ifndef UNPACKED_MAX_VECTORS
#define UNPACKED_MAX_VECTORS 4
#endif
#define UNPACKED_MAX_B_BYTES (1 << 19)

/* c[i, j] for i in [first_row, first_row + rows), j in [first_column, first_column
 * + columns) of c[m, n] = op(a) @ op(b), op(a) [m, k], op(b) [k, n], where a is
 * stored [k, m] when transpose_a and b [n, k] when transpose_b (see native.gemm). */
typedef struct {
    Py_ssize_t m, k, n;
    int transpose_a, transpose_b;
    Py_ssize_t first_row, rows, first_column, columns;
} GemmGeometry;

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

#define RUN_GEMM(T, SUFFIX, LANES, g, a, b, c, status)                                  \
    do {                                                                                \
        const Py_ssize_t a_row = (g).transpose_a ? 1 : (g).k;                           \
        const Py_ssize_t a_col = (g).transpose_a ? (g).m : 1;                           \
        const Py_ssize_t b_row = (g).transpose_b ? 1 : (g).n;                           \
        const Py_ssize_t b_col = (g).transpose_b ? (g).k : 1;                           \
        const T *a_ = (const T *)(a) + (g).first_row * a_row;                           \
        const T *b_ = (const T *)(b) + (g).first_column * b_col;                        \
        T *c_ = (T *)(c) + (g).first_row * (g).n + (g).first_column;                    \
        if (!(g).transpose_b && (g).columns % (LANES) == 0                              \
            && (g).columns <= UNPACKED_MAX_VECTORS * (LANES)                            \
            && (g).k * (g).columns * (Py_ssize_t)sizeof(T) <= UNPACKED_MAX_B_BYTES)     \
            gemm_##SUFFIX(a_, a_row, a_col, b_, b_row, c_, (g).n, (g).rows, (g).k,      \
                          (g).columns, 0);                                              \
        else                                                                            \
            status = blocked_gemm_##SUFFIX(a_, a_row, a_col, b_, b_row, b_col, c_,      \
                                           (g).n, (g).rows, (g).k, (g).columns);        \
    } while (0)

/* gemm_vectorised(): whether the GEMMs run on 64-byte vectors in registers. Their
 * vectors are 16 float32 wide: on a CPU without AVX-512 (their AVX2 and default
 * clones), or built without the clones, GCC moves them through memory in pieces,
 * and they ran at 2-3 GFLOP/s, 40x slower than OpenBLAS; native.py leaves every
 * GEMM to NumPy there. */
static PyObject *py_gemm_vectorised(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
#if defined(__AVX512F__)
    Py_RETURN_TRUE;
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    __builtin_cpu_init();
    return PyBool_FromLong(__builtin_cpu_supports("avx512f"));
#else
    Py_RETURN_FALSE;
#endif
}

/* gemm(geometry, a, b, c): the block of c = op(a) @ op(b) that the geometry names
 * (see GemmGeometry); the rest of c is left as it was. */
static PyObject *py_gemm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *a_obj, *b_obj, *c_obj;
    GemmGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOO:gemm", &PyTuple_Type, &shape, &a_obj, &b_obj, &c_obj)
        || read_gemm_geometry(shape, &g) < 0)
        return NULL;
    char kind = float_kind(a_obj, "a");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *a, *b, *c;
    if (take(&views, a_obj, 0, kind, SIZES(g.m, g.k), "a", &a) < 0
        || take(&views, b_obj, 0, kind, SIZES(g.k, g.n), "b", &b) < 0
        || take(&views, c_obj, 1, kind, SIZES(g.m, g.n), "c", &c) < 0) {
        release_all(&views);
        return NULL;
    }
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        RUN_GEMM(float, f32, 16, g, a, b, c, status);
    else
        RUN_GEMM(double, f64, 8, g, a, b, c, status);
    Py_END_ALLOW_THREADS
    release_all(&views);
    if (status < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    /* training-mode batch norm */
    {"batch_norm_sums", py_batch_norm_sums, METH_VARARGS,
     "batch_norm_sums(geometry, x, shift, grad, relu_output, partials): per block of rows, "
     "float64 sums of x - shift and its square (grad None), or of g and g * (x - shift) "
     "(g = grad, masked by relu_output > 0 unless None) into partials[blocks, 2, C]."},
    {"batch_norm_apply", py_batch_norm_apply, METH_VARARGS,
     "batch_norm_apply(geometry, x, coefficients, y, relu): y = (x - mean) * gain + offset "
     "(coefficients [3, C]), ReLU after if relu, for rows [first, stop)."},
    {"batch_norm_pool", py_batch_norm_pool, METH_VARARGS,
     "batch_norm_pool(geometry, x, coefficients, out, code): max pooling (windows that "
     "tile x, at most 8 taps) of relu((x - mean) * gain + offset) into out, winner bits "
     "into code."},
    {"batch_norm_grad_apply", py_batch_norm_grad_apply, METH_VARARGS,
     "batch_norm_grad_apply(geometry, grad, relu_output, x, coefficients, dx): dx = "
     "(g * gain + (x - mean) * k_centered) - k_mean (coefficients [4, C]) for rows "
     "[first, stop); g masked by relu_output > 0 unless None."},
    {"im2col", py_im2col, METH_VARARGS,
     "im2col(geometry, x, patches): the [N*OH*OW, KH*KW*C] patch matrix of the NHWC x "
     "(zeros for padding) into patches."},
    {"col2im", py_col2im, METH_VARARGS,
     "col2im(geometry, dx, patches): dx = the sum of each patch row's values at the "
     "cells its window read (im2col's adjoint)."},
    {"max_pool", py_max_pool, METH_VARARGS,
     "max_pool(geometry, x, bias, out, code, relu): tiled max pooling of x into out "
     "(winner bits into code unless None); adds bias to x in place first unless None; "
     "ReLU on out if relu."},
    {"max_pool_grad", py_max_pool_grad, METH_VARARGS,
     "max_pool_grad(geometry, code, grad, pooled, dx): each window's grad (masked by "
     "pooled > 0 unless pooled is None) to its first maximum in dx; zeros elsewhere."},
    {"winograd_input", py_winograd_input, METH_VARARGS,
     "winograd_input(geometry, x, u): u[plane_tiles, 36, C] (from first_tile on) = B^T d B "
     "of each 4x4-output tile's 6x6 window of the NHWC x (Winograd F(4x4, 3x3); zeros "
     "outside x)."},
    {"winograd_output", py_winograd_output, METH_VARARGS,
     "winograd_output(geometry, m, y): y[N, OH, OW, O] = A^T m A of each tile of "
     "m[tiles, 36, O], cropped to the output."},
    {"winograd_grad_tiles", py_winograd_grad_tiles, METH_VARARGS,
     "winograd_grad_tiles(geometry, v, grad): v[tiles, 36, O] = A e A^T of each 4x4 tile e "
     "of the NHWC output gradient (zeros past its edge), for the filter gradient."},
    {"gemm", py_gemm, METH_VARARGS,
     "gemm(geometry, a, b, c): a block of c = op(a) @ op(b), either operand transposed "
     "(the register-blocked kernel of Winograd's GEMMs; blocked and packed for deep inner "
     "dimensions)."},
    {"gemm_vectorised", py_gemm_vectorised, METH_NOARGS,
     "gemm_vectorised(): whether gemm and winograd_gemms run on AVX-512 vectors (else "
     "they are 40x slower than OpenBLAS: leave them to NumPy)."},
    {"winograd_gemms", py_winograd_gemms, METH_VARARGS,
     "winograd_gemms(geometry, u, w, m): the 36 GEMMs of a block of Winograd tiles "
     "(m[:, t] = u[:, t] @ w[t], or with sums m[t] += u[:, t]^T @ w[:, t]; see _native.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Compiled window kernels (see native.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    return PyModule_Create(&module);
}
