/* Training-mode batch norm (native_batch_norm.py) and its entry points. */
#include "native_common.h"

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
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif

typedef struct {
    Py_ssize_t rows, channels, block_rows, first, stop;   /* blocks [first, stop) */
} SumsGeometry;

typedef struct {
    Py_ssize_t rows, channels, first, stop;               /* rows [first, stop) */
} ApplyGeometry;

/* AVX-512 or AVX2 where the CPU has it (chosen when the module loads); no FMA
 * (fp-contract off above), so each clone rounds exactly as the baseline one does:
 * the same bits on any x86. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define WIDE_LOOPS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WIDE_LOOPS
#endif

/* -- the routed gradient of a max pool (batch norm → ReLU → max pool's gradient) ---- */

/* fusion.py's _MaxPoolGradReluBatchNormGrad: FusedBatchNormGrad of the gradient that
 * MaxPoolGrad → ReluGrad give, without writing that full-size gradient. Each block
 * of rows of it is made again from the pooled arrays (a quarter of its size for
 * 2x2 windows, and read from cache) into a small buffer, right before the sums or
 * the output read it (batch_norm_sums and batch_norm_grad_apply given a pool): the
 * values max_pool_grad writes, bit for bit, so the sums add the same terms in the
 * same order and the chain's outputs are the separate kernels', bit for bit. */

/* The pooled side: MaxPool's winner bits, its gradient and its max, [N, OH, OW, C],
 * over windows that tile the [N, H, W, C] rows (g). */
typedef struct {
    const uint8_t *code;
    const void *grad, *pooled;
    Geometry g;
} PooledGrad;

/* Eight winner codes as integers as wide as the floats: each lane shifts its byte
 * down from a broadcast word (GCC 12 converted a vector of 8 bytes one byte at a
 * time, through general registers: 2x slower than the separate kernels). Code k
 * is the word's k-th byte in memory: its low byte first on a little-endian CPU. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define CODE_SHIFTS_32 {24, 16, 8, 0, 24, 16, 8, 0}
#define CODE_SHIFTS_64 {56, 48, 40, 32, 24, 16, 8, 0}
#else
#define CODE_SHIFTS_32 {0, 8, 16, 24, 0, 8, 16, 24}
#define CODE_SHIFTS_64 {0, 8, 16, 24, 32, 40, 48, 56}
#endif
typedef uint32_t uint32_lanes __attribute__((vector_size(8 * sizeof(uint32_t))));
typedef uint64_t uint64_lanes __attribute__((vector_size(8 * sizeof(uint64_t))));
typedef int32_t int32_t_lanes __attribute__((vector_size(8 * sizeof(int32_t))));
typedef int64_t int64_t_lanes __attribute__((vector_size(8 * sizeof(int64_t))));

/* (Written through a pointer: a vector returned by value draws GCC's -Wpsabi note.) */
static inline __attribute__((always_inline)) void codes_int32_t(const uint8_t *k,
                                                                int32_t_lanes *codes)
{
    uint32_t words[2];
    memcpy(words, k, sizeof words);
    const uint32_lanes broadcast = {words[0], words[0], words[0], words[0],
                                    words[1], words[1], words[1], words[1]};
    *codes = (int32_t_lanes)((broadcast >> (uint32_lanes)CODE_SHIFTS_32) & 255);
}

static inline __attribute__((always_inline)) void codes_int64_t(const uint8_t *k,
                                                                int64_t_lanes *codes)
{
    uint64_t word;
    memcpy(&word, k, sizeof word);
    const uint64_lanes broadcast = (uint64_lanes){0} + word;
    *codes = (int64_t_lanes)((broadcast >> (uint64_lanes)CODE_SHIFTS_64) & 255);
}

/* Values per buffer of rows that batch_norm_grad_apply routes at a time (32 KiB
 * of float32, 64 KiB of float64: it is written, then read at once, in cache). */
#define APPLY_CHUNK_VALUES 8192

#define DEFINE_ROUTED_GRAD(T, LANE, SUFFIX)                                             \
/* out = rows [start, end) of the [N*H*W, C] gradient: each window's gradient times   \
 * (T)(max > 0) at the window's first maximum (the lowest set bit), zeros elsewhere  \
 * and in the cells no window covers, as max_pool_grad writes them. */                \
static inline __attribute__((always_inline)) void                                       \
expand_pooled_grad_##SUFFIX(const PooledGrad *p, Py_ssize_t start, Py_ssize_t end,      \
                            T *restrict out)                                            \
{                                                                                       \
    const Geometry *g = &p->g;                                                          \
    const Py_ssize_t c = g->c;                                                          \
    const T *grad = p->grad, *pooled = p->pooled;                                       \
    /* the row's place: image, row y = r * kh + i, column x = q * kw + j */            \
    Py_ssize_t x = start % g->w, y = start / g->w % g->h, img = start / g->w / g->h;    \
    Py_ssize_t q = x / g->kw, j = x % g->kw, r = y / g->kh, i = y % g->kh;              \
    for (Py_ssize_t row = start; row < end;) {                                          \
        /* a run of rows: a window's next columns, or cells no window covers */         \
        const int covered = r < g->oh && q < g->ow;                                     \
        Py_ssize_t run = covered ? g->kw - j : g->w - x;                                \
        run = run < end - row ? run : end - row;                                        \
        if (covered) {                                                                  \
            const Py_ssize_t cell = ((img * g->oh + r) * g->ow + q) * c;                \
            const LANE bit = (LANE)1 << (i * g->kw + j);   /* the run's first tap */    \
            const uint8_t *k = p->code + cell;                                          \
            const T *gr = grad + cell, *pl = pooled + cell;                             \
            Py_ssize_t ch = 0;                                                          \
            for (; ch + 8 <= c; ch += 8) {      /* out = first == bit ? value : 0 */    \
                T##_lanes value, max;                                                   \
                memcpy(&value, gr + ch, sizeof value);                                  \
                memcpy(&max, pl + ch, sizeof max);                                      \
                LANE##_lanes code8;                                                     \
                codes_##LANE(k + ch, &code8);                                           \
                const LANE##_lanes first = code8 & -code8;                              \
                value = value * __builtin_convertvector(-(max > 0), T##_lanes);         \
                LANE##_lanes bits;                                                      \
                memcpy(&bits, &value, sizeof bits);                                     \
                for (Py_ssize_t t = 0; t < run; t++) {                                  \
                    const LANE##_lanes hit = first == bit << t;       /* -1 or 0 */     \
                    const LANE##_lanes routed = bits & hit;                             \
                    memcpy(out + t * c + ch, &routed, sizeof routed);                   \
                }                                                                       \
            }                                                                           \
            for (; ch < c; ch++) {                                                      \
                const LANE first = k[ch] & -(LANE)k[ch];                                \
                const T value = gr[ch] * (T)(pl[ch] > 0);                               \
                for (Py_ssize_t t = 0; t < run; t++)                                    \
                    out[t * c + ch] = first == bit << t ? value : (T)0;                 \
            }                                                                           \
        } else                                                                          \
            memset(out, 0, (size_t)(run * c) * sizeof(T));                              \
        row += run;                                                                     \
        out += run * c;                                                                 \
        x += run;                                                                       \
        j += run;                                                                       \
        if (j == g->kw) {                                                               \
            j = 0;                                                                      \
            q++;                                                                        \
        }                                                                               \
        if (x == g->w) {                                                                \
            x = q = j = 0;                                                              \
            if (++i == g->kh) {                                                         \
                i = 0;                                                                  \
                r++;                                                                    \
            }                                                                           \
            if (++y == g->h) {                                                          \
                y = r = i = 0;                                                          \
                img++;                                                                  \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
}

DEFINE_ROUTED_GRAD(float, int32_t, f32)
DEFINE_ROUTED_GRAD(double, int64_t, f64)

/* -- the passes ---------------------------------------------------------------------- */

/* The sums run down the rows a strip of channels at a time, in registers: with the
 * rows outermost, each row's sums were loaded and stored again, and every row waited
 * for the last one's store (measured: 20 GB/s of x on one core). A strip of up to
 * STRIP_VECTORS vectors of SUM_LANES channels; each channel's sum still adds the rows
 * in order, so the bits are those of the row-by-row loop. */
#define SUM_LANES 8         /* a double_lanes */
#define STRIP_VECTORS 4

#define DEFINE_BATCH_NORM_SUMS(T, SUFFIX)                                               \
/* first/second[ch0 ..] = the sums over the `rows` rows of `vectors` vectors of          \
 * channels from ch0 on (see batch_norm_sums_##SUFFIX). */                              \
static inline __attribute__((always_inline)) void                                       \
sums_strip_##SUFFIX(const T *x, const T *shift, const T *grad, const T *relu,           \
                    double *first, double *second, Py_ssize_t c, Py_ssize_t rows,       \
                    Py_ssize_t ch0, int vectors)                                        \
{                                                                                       \
    double_lanes sum1[STRIP_VECTORS], sum2[STRIP_VECTORS], shifts[STRIP_VECTORS];       \
    for (int v = 0; v < vectors; v++) {                                                 \
        T##_lanes lanes;                                                                \
        memcpy(&lanes, shift + ch0 + v * SUM_LANES, sizeof lanes);                      \
        shifts[v] = __builtin_convertvector(lanes, double_lanes);                       \
        sum1[v] = sum2[v] = (double_lanes){0};                                          \
    }                                                                                   \
    for (Py_ssize_t row = 0; row < rows; row++)                                         \
        for (int v = 0; v < vectors; v++) {                                             \
            const Py_ssize_t at = row * c + ch0 + v * SUM_LANES;                        \
            T##_lanes lanes;                                                            \
            memcpy(&lanes, x + at, sizeof lanes);                                       \
            const double_lanes d = __builtin_convertvector(lanes, double_lanes) - shifts[v]; \
            if (!grad) {                                                                \
                sum1[v] += d;                                                           \
                sum2[v] += d * d;                                                       \
                continue;                                                               \
            }                                                                           \
            T##_lanes g;                                                                \
            memcpy(&g, grad + at, sizeof g);                                            \
            if (relu) {                 /* g * (T)(relu > 0), as the scalar loop */     \
                T##_lanes r;                                                            \
                memcpy(&r, relu + at, sizeof r);                                        \
                g = g * __builtin_convertvector(-(r > 0), T##_lanes);                   \
            }                                                                           \
            const double_lanes gv = __builtin_convertvector(g, double_lanes);           \
            sum1[v] += gv;                                                              \
            sum2[v] += gv * d;                                                          \
        }                                                                               \
    for (int v = 0; v < vectors; v++) {                                                 \
        memcpy(first + ch0 + v * SUM_LANES, &sum1[v], sizeof sum1[v]);                  \
        memcpy(second + ch0 + v * SUM_LANES, &sum2[v], sizeof sum2[v]);                 \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* first/second[C] = the sums over `rows` rows of x (and grad, relu), each pointer at \
 * the block's first row: strips of channels, then the last c % SUM_LANES. */        \
static inline __attribute__((always_inline)) void                                       \
block_sums_##SUFFIX(const T *x, const T *shift, const T *grad, const T *relu,           \
                    double *restrict first, double *restrict second, Py_ssize_t c,      \
                    Py_ssize_t rows)                                                    \
{                                                                                       \
    Py_ssize_t ch0 = 0;                                                                 \
    for (; ch0 + STRIP_VECTORS * SUM_LANES <= c; ch0 += STRIP_VECTORS * SUM_LANES)      \
        sums_strip_##SUFFIX(x, shift, grad, relu, first, second, c, rows, ch0,          \
                            STRIP_VECTORS);                                             \
    for (; ch0 + SUM_LANES <= c; ch0 += SUM_LANES)                                      \
        sums_strip_##SUFFIX(x, shift, grad, relu, first, second, c, rows, ch0, 1);      \
    for (Py_ssize_t ch = ch0; ch < c; ch++)     /* the last c % SUM_LANES */            \
        first[ch] = second[ch] = 0.0;                                                   \
    for (Py_ssize_t row = 0; row < rows && ch0 < c; row++) {                            \
        const T *restrict xr = x + row * c;                                             \
        for (Py_ssize_t ch = ch0; ch < c; ch++) {                                       \
            const double d = (double)xr[ch] - (double)shift[ch];                        \
            if (!grad) {                                                                \
                first[ch] += d;                                                         \
                second[ch] += d * d;                                                    \
                continue;                                                               \
            }                                                                           \
            const double gv = relu ? grad[row * c + ch] * (T)(relu[row * c + ch] > 0)   \
                                   : grad[row * c + ch];                                \
            first[ch] += gv;                                                            \
            second[ch] += gv * d;                                                       \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* With a pool, each block's gradient is routed into `routed` [block_rows, C] first. */ \
WIDE_LOOPS static void batch_norm_sums_##SUFFIX(const T *x, const T *shift,             \
                                                const T *grad, const T *relu,           \
                                                const PooledGrad *pool, T *routed,      \
                                                double *partials, const SumsGeometry *g) \
{                                                                                       \
    const Py_ssize_t c = g->channels;                                                   \
    for (Py_ssize_t block = g->first; block < g->stop; block++) {                       \
        const Py_ssize_t start = block * g->block_rows;                                 \
        const Py_ssize_t end = start + g->block_rows < g->rows ? start + g->block_rows  \
                                                                : g->rows;              \
        const T *block_grad = grad ? grad + start * c : NULL;                           \
        if (pool) {                                                                     \
            expand_pooled_grad_##SUFFIX(pool, start, end, routed);                      \
            block_grad = routed;                                                        \
        }                                                                               \
        block_sums_##SUFFIX(x + start * c, shift, block_grad,                           \
                            relu ? relu + start * c : NULL, partials + block * 2 * c,   \
                            partials + block * 2 * c + c, c, end - start);              \
    }                                                                                   \
}

DEFINE_BATCH_NORM_SUMS(float, f32)
DEFINE_BATCH_NORM_SUMS(double, f64)

#define DEFINE_BATCH_NORM(T, SUFFIX)                                                    \
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
/* dx = (g * gain + (x - mean) * k_centered) - k_mean over `rows` rows (each pointer  \
 * at the first), g masked by relu > 0 when relu is given; coefficients [4, C]: mean, \
 * gain, k_centered, k_mean. */                                                      \
static inline __attribute__((always_inline)) void                                       \
grad_apply_rows_##SUFFIX(const T *restrict grad, const T *restrict relu,                \
                         const T *restrict x, const T *coefficients, T *restrict dx,    \
                         Py_ssize_t c, Py_ssize_t rows)                                 \
{                                                                                       \
    const T *mean = coefficients, *gain = mean + c, *k_centered = gain + c;             \
    const T *k_mean = k_centered + c;                                                   \
    for (Py_ssize_t row = 0; row < rows; row++) {                                       \
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
}                                                                                       \
                                                                                        \
/* grad_apply_rows over rows [first, stop); with a pool, `chunk` rows at a time,     \
 * their gradient routed into `routed` [chunk, C] first. */                             \
WIDE_LOOPS static void batch_norm_grad_apply_##SUFFIX(const T *grad, const T *relu,    \
                                                      const T *x, const T *coefficients, \
                                                      T *dx, const PooledGrad *pool,    \
                                                      T *routed, Py_ssize_t chunk,      \
                                                      const ApplyGeometry *g)           \
{                                                                                       \
    const Py_ssize_t c = g->channels, at = g->first * c;                                \
    if (!pool) {                                                                        \
        grad_apply_rows_##SUFFIX(grad + at, relu ? relu + at : NULL, x + at,            \
                                 coefficients, dx + at, c, g->stop - g->first);         \
        return;                                                                         \
    }                                                                                   \
    for (Py_ssize_t start = g->first; start < g->stop; start += chunk) {                \
        const Py_ssize_t end = start + chunk < g->stop ? start + chunk : g->stop;       \
        expand_pooled_grad_##SUFFIX(pool, start, end, routed);                          \
        grad_apply_rows_##SUFFIX(routed, NULL, x + start * c, coefficients,             \
                                 dx + start * c, c, end - start);                       \
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

/* ceil(rows / block_rows), rows >= 0 and block_rows > 0, without overflow. */
static Py_ssize_t blocks_of(Py_ssize_t rows, Py_ssize_t block_rows)
{
    return rows / block_rows + (rows % block_rows != 0);
}

static int read_rows(PyObject *shape, Py_ssize_t *rows, Py_ssize_t *channels,
                     Py_ssize_t *first, Py_ssize_t *stop, Py_ssize_t *block_rows)
{
    int ok = block_rows
        ? PyArg_ParseTuple(shape, "nnnnn", rows, channels, block_rows, first, stop)
        : PyArg_ParseTuple(shape, "nnnn", rows, channels, first, stop);
    if (!ok)
        return -1;
    /* NOTE: ceil(rows / block_rows) without rows + block_rows - 1, which overflowed
     * (UBSan) for rows near PY_SSIZE_T_MAX */
    Py_ssize_t count = !block_rows ? *rows
        : *block_rows > 0 && *rows >= 0 ? blocks_of(*rows, *block_rows) : -1;
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

/* The entry points below record under run_parts (native_parts.c). */

/* The optional pool argument of batch_norm_sums and batch_norm_grad_apply: a tuple
 * (pool_geometry, code, pooled) where grad is MaxPool's gradient, to be routed
 * (expand_pooled_grad) rather than read as rows; pool_geometry's windows
 * (n, h, w, c, kh, kw, oh, ow) over the [rows, channels] x. Takes grad too. */
static int take_pooled(Views *views, PooledGrad *p, PyObject *pool, char kind,
                       PyObject *grad_obj, PyObject *relu_obj, Py_ssize_t rows,
                       Py_ssize_t channels)
{
    PyObject *pool_shape, *code_obj, *pooled_obj;
    Geometry *g = &p->g;
    Py_ssize_t cells;
    if (!PyArg_ParseTuple(pool, "O!OO:pool", &PyTuple_Type, &pool_shape, &code_obj,
                          &pooled_obj)
        || read_geometry(pool_shape, g) < 0
        || product_of(SIZES(g->n, g->h, g->w), "pool geometry", &cells) < 0)
        return -1;
    if (g->c != channels || cells != rows) {
        PyErr_SetString(PyExc_ValueError, "pool: its geometry's (n, h, w, c) must be the "
                                          "rows' [n * h * w, c]");
        return -1;
    }
    if (relu_obj != Py_None) {
        PyErr_SetString(PyExc_ValueError, "relu_output: expected None with a pool (the "
                                          "pooled max masks the gradient)");
        return -1;
    }
    if (code_obj == Py_None || grad_obj == Py_None || pooled_obj == Py_None) {
        PyErr_SetString(PyExc_ValueError, "pool: code, grad and pooled must be arrays");
        return -1;
    }
    void *code;
    if (take(views, code_obj, 0, 'B', SIZES(g->n, g->oh, g->ow, g->c), "code", &code) < 0
        || take(views, grad_obj, 0, kind, SIZES(g->n, g->oh, g->ow, g->c), "grad",
                (void **)&p->grad) < 0
        || take(views, pooled_obj, 0, kind, SIZES(g->n, g->oh, g->ow, g->c), "pooled",
                (void **)&p->pooled) < 0)
        return -1;
    p->code = code;
    return 0;
}

/* grad: [rows, channels] rows into *grad, or with a pool MaxPool's gradient into *p
 * (*routed set). */
static int take_grad(Views *views, void **grad, PooledGrad *p, int *routed, PyObject *pool,
                     char kind, PyObject *grad_obj, PyObject *relu_obj, Py_ssize_t rows,
                     Py_ssize_t channels)
{
    *routed = pool != NULL;
    return pool ? take_pooled(views, p, pool, kind, grad_obj, relu_obj, rows, channels)
                : take_optional(views, grad_obj, 0, kind, SIZES(rows, channels), "grad", grad);
}

/* Rows of scratch for expand_pooled_grad, or NULL with out_of_memory set. */
static void *scratch_rows(Task *task, char kind, Py_ssize_t rows, Py_ssize_t channels)
{
    const size_t item = kind == 'f' ? sizeof(float) : sizeof(double);
    void *scratch = malloc((size_t)rows * (size_t)channels * item + 1);
    if (!scratch)
        task->out_of_memory = "batch norm: no memory for a block of the routed gradient";
    return scratch;
}

typedef struct {
    Task task;
    char kind;
    void *x, *shift, *grad, *relu, *partials;
    int routed;                 /* the gradient is routed from pool (grad NULL) */
    PooledGrad pool;
    SumsGeometry g;
} SumsCall;

static void run_batch_norm_sums(Task *task)
{
    SumsCall *c = (SumsCall *)task;
    const PooledGrad *pool = c->routed ? &c->pool : NULL;
    /* (at most the rows there are: a block no larger than x, whose size was checked) */
    const Py_ssize_t rows = c->g.block_rows < c->g.rows ? c->g.block_rows : c->g.rows;
    void *routed = pool ? scratch_rows(task, c->kind, rows, c->g.channels) : NULL;
    if (pool && !routed)
        return;
    BY_KIND(c->kind, batch_norm_sums, c->x, c->shift, c->grad, c->relu, pool, routed,
            c->partials, &c->g);
    free(routed);
}

PyObject *py_batch_norm_sums(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *shift_obj, *grad_obj, *relu_obj, *partials_obj, *pool = NULL;
    SumsGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOOOO|O!:batch_norm_sums", &PyTuple_Type, &shape, &x_obj,
                          &shift_obj, &grad_obj, &relu_obj, &partials_obj, &PyTuple_Type,
                          &pool)
        || read_rows(shape, &g.rows, &g.channels, &g.first, &g.stop, &g.block_rows) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    if (grad_obj == Py_None && (relu_obj != Py_None || pool)) {
        PyErr_SetString(PyExc_ValueError, "relu_output, pool: expected None without a grad");
        return NULL;
    }
    Py_ssize_t blocks = g.block_rows ? blocks_of(g.rows, g.block_rows) : 0;
    SumsCall *call = new_task(sizeof *call, run_batch_norm_sums);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, x_obj, 0, kind, SIZES(g.rows, g.channels), "x", &call->x) < 0
        || take(views, shift_obj, 0, kind, SIZES(g.channels), "shift", &call->shift) < 0
        || take_grad(views, &call->grad, &call->pool, &call->routed, pool, kind, grad_obj,
                     relu_obj, g.rows, g.channels) < 0
        || take_optional(views, relu_obj, 0, kind, SIZES(g.rows, g.channels), "relu_output",
                &call->relu) < 0
        || take(views, partials_obj, 1, 'd', SIZES(blocks, 2, g.channels), "partials",
                &call->partials) < 0) {
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
    int relu;
    void *x, *coefficients, *y;
    ApplyGeometry g;
} ApplyCall;

static void run_batch_norm_apply(Task *task)
{
    ApplyCall *c = (ApplyCall *)task;
    BY_KIND(c->kind, batch_norm_apply, c->x, c->coefficients, c->y, c->relu, &c->g);
}

PyObject *py_batch_norm_apply(PyObject *self, PyObject *args)
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
    ApplyCall *call = new_task(sizeof *call, run_batch_norm_apply);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, x_obj, 0, kind, SIZES(g.rows, g.channels), "x", &call->x) < 0
        || take(views, coefficients_obj, 0, kind, SIZES(3, g.channels), "coefficients",
                &call->coefficients) < 0
        || take(views, y_obj, 1, kind, SIZES(g.rows, g.channels), "y", &call->y) < 0) {
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
    void *grad, *relu, *x, *coefficients, *dx;
    int routed;                 /* the gradient is routed from pool (grad NULL) */
    PooledGrad pool;
    ApplyGeometry g;
} GradApplyCall;

static void run_batch_norm_grad_apply(Task *task)
{
    GradApplyCall *c = (GradApplyCall *)task;
    const PooledGrad *pool = c->routed ? &c->pool : NULL;
    const Py_ssize_t chunk = c->g.channels > 0 && c->g.channels < APPLY_CHUNK_VALUES
                             ? APPLY_CHUNK_VALUES / c->g.channels : 1;
    void *routed = pool ? scratch_rows(task, c->kind, chunk, c->g.channels) : NULL;
    if (pool && !routed)
        return;
    BY_KIND(c->kind, batch_norm_grad_apply, c->grad, c->relu, c->x, c->coefficients, c->dx,
            pool, routed, chunk, &c->g);
    free(routed);
}

PyObject *py_batch_norm_grad_apply(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *grad_obj, *relu_obj, *x_obj, *coefficients_obj, *dx_obj, *pool = NULL;
    ApplyGeometry g;
    if (!PyArg_ParseTuple(args, "O!OOOOO|O!:batch_norm_grad_apply", &PyTuple_Type, &shape,
                          &grad_obj, &relu_obj, &x_obj, &coefficients_obj, &dx_obj,
                          &PyTuple_Type, &pool)
        || read_rows(shape, &g.rows, &g.channels, &g.first, &g.stop, NULL) < 0)
        return NULL;
    char kind = float_kind(x_obj, "x");
    if (!kind)
        return NULL;
    if (grad_obj == Py_None) {
        PyErr_SetString(PyExc_ValueError, "grad: expected an array, got None");
        return NULL;
    }
    GradApplyCall *call = new_task(sizeof *call, run_batch_norm_grad_apply);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take_grad(views, &call->grad, &call->pool, &call->routed, pool, kind, grad_obj,
                  relu_obj, g.rows, g.channels) < 0
        || take_optional(views, relu_obj, 0, kind, SIZES(g.rows, g.channels), "relu_output",
                &call->relu) < 0
        || take(views, x_obj, 0, kind, SIZES(g.rows, g.channels), "x", &call->x) < 0
        || take(views, coefficients_obj, 0, kind, SIZES(4, g.channels), "coefficients",
                &call->coefficients) < 0
        || take(views, dx_obj, 1, kind, SIZES(g.rows, g.channels), "dx", &call->dx) < 0) {
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
    void *x, *coefficients, *out, *code;
    Geometry g;
} BatchNormPoolCall;

static void run_batch_norm_pool(Task *task)
{
    BatchNormPoolCall *c = (BatchNormPoolCall *)task;
    BY_KIND(c->kind, batch_norm_pool, c->x, c->coefficients, c->out, c->code, &c->g);
}

PyObject *py_batch_norm_pool(PyObject *self, PyObject *args)
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
    BatchNormPoolCall *call = new_task(sizeof *call, run_batch_norm_pool);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, x_obj, 0, kind, SIZES(g.n, g.h, g.w, g.c), "x", &call->x) < 0
        || take(views, coefficients_obj, 0, kind, SIZES(3, g.c), "coefficients",
                &call->coefficients) < 0
        || take(views, out_obj, 1, kind, SIZES(g.n, g.oh, g.ow, g.c), "out", &call->out) < 0
        || take(views, code_obj, 1, 'B', SIZES(g.n, g.oh, g.ow, g.c), "code",
                &call->code) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->g = g;
    return submit(&call->task);
}

/* == end of training-mode batch norm ============================================= */
