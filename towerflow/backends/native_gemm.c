/* The register-blocked GEMM, Winograd's 36 GEMMs on it, and their entry points. */
#include "native_common.h"

#include <pthread.h>
#include <stdlib.h>

/* -- Winograd's 36 GEMMs -------------------------------------------------------------- */

/* The term-by-term products of Winograd (m[t] = u[t] @ v[t] for the 36 terms t,
 * and the filter gradient's sums u[t]^T @ e[t]) are GEMMs with short inner
 * dimensions (32 to 128 channels): OpenBLAS reaches about half of a core's
 * float32 peak on them, through NumPy's stacked matmul. A register-blocked
 * kernel (8 or 10 rows of a times two vectors of b's columns held in registers,
 * rank-1 updates along p) reaches 190-240 GFLOP/s on one AVX-512 core. The
 * function is compiled for AVX-512, AVX2 and plain x86-64; the CPU picks at
 * load time (GCC's target_clones), so one build runs everywhere. The sum
 * over p runs in the same order for every element and call: results are
 * the same bits run after run and on any thread. */

/* Rows of a register tile of the blocked GEMM (its packed panels). */
#define GEMM_ROWS 6
/* The unpacked kernel (gemm_##SUFFIX) holds up to WIDE_GEMM_ROWS rows in AVX-512's 32
 * vector registers (20 accumulators; it only runs where the CPU has AVX-512, see
 * gemm_vectorised): each b vector loaded meets 10 rows instead of the 6 it had. On the
 * cifar10 network's Winograd GEMMs (one core; [tiles, 36, C] by [36, C, O] for C, O
 * of 32 to 128) the filter gradient's products, whose rows are the 32-128 input
 * channels, went from 138-168 to 199-240 GFLOP/s and the forward ones from 170-216 to
 * 193-239; the training step at batch 64 took 4 % less time (24.0 against 25.4 ms,
 * six alternated processes). */
#define WIDE_GEMM_ROWS 10

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
#define STORE_TWO(vec, lanes, out, low, high)                                           \
    do { STORE_ONE(vec, out, low); STORE_ONE(vec, (out) + (lanes), high); } while (0)

/* column_strip's case for a last tile of `rows` rows (fewer than a whole tile's), the
 * row count a constant so that the tile's loops unroll. */
#define LAST_TILE(SUFFIX, rows)                                                         \
    case rows:                                                                          \
        register_tile_##SUFFIX(rest_a, a_row, a_col, b, b_row, rest_c, c_row, k, rows,  \
                               width, accumulate);                                      \
        break;

/* n, the columns, a multiple of LANES (the wrappers refuse other widths: a
 * scalar loop for the last few columns ran at a tenth of OpenBLAS's speed).
 * c(i, j) = sum_p a(i, p) b(p, j) (with accumulate: c(i, j) += that sum), i < m,
 * j < n, a(i, p) = a[i * a_row + p * a_col], b(p, j) = b[p * b_row + j],
 * c(i, j) = c[i * c_row + j]; a vector holds LANES items. */
#define DEFINE_GEMM(T, SUFFIX, LANES)                                                    \
typedef T vec_##SUFFIX __attribute__((vector_size((LANES) * sizeof(T)), aligned(sizeof(T)))); \
                                                                                        \
/* `rows` (at most WIDE_GEMM_ROWS, a constant where inlined) rows of c from (0, 0) on, \
 * `width` (1 or 2, also constant) vectors of columns: the register tile. */            \
static inline __attribute__((always_inline)) void                                       \
register_tile_##SUFFIX(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,         \
                       const T *restrict b, Py_ssize_t b_row, T *restrict c,            \
                       Py_ssize_t c_row, Py_ssize_t k, int rows, int width,             \
                       int accumulate)                                                  \
{                                                                                       \
    vec_##SUFFIX acc[WIDE_GEMM_ROWS][2];                                                \
    memset(acc, 0, sizeof acc);                                                         \
    for (Py_ssize_t p = 0; p < k; p++) {                                                \
        vec_##SUFFIX b0, b1;                                                            \
        memcpy(&b0, b + p * b_row, sizeof b0);                                          \
        if (width == 2)                                                                 \
            memcpy(&b1, b + p * b_row + (LANES), sizeof b1);                            \
        for (int r = 0; r < rows; r++) {                                                \
            const T s = a[r * a_row + p * a_col];                                       \
            acc[r][0] += s * b0;                                                        \
            if (width == 2)                                                             \
                acc[r][1] += s * b1;                                                    \
        }                                                                               \
    }                                                                                   \
    for (int r = 0; r < rows; r++) {                                                    \
        STORE_ONE(vec_##SUFFIX, c + r * c_row, acc[r][0]);                              \
        if (width == 2)                                                                 \
            STORE_ONE(vec_##SUFFIX, c + r * c_row + (LANES), acc[r][1]);                \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* Rows i.. of one column strip (`width` vectors from column j): whole register tiles  \
 * of `tile_rows` rows (a constant where inlined), then the last m % tile_rows rows as \
 * one smaller tile (as rows one at a time, they took a fifth of the time of a 16-row \
 * product). */                                                                         \
static inline __attribute__((always_inline)) void                                       \
column_strip_##SUFFIX(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,          \
                      const T *restrict b, Py_ssize_t b_row, T *restrict c,             \
                      Py_ssize_t c_row, Py_ssize_t m, Py_ssize_t k, int width,          \
                      int accumulate, int tile_rows)                                    \
{                                                                                       \
    Py_ssize_t i = 0;                                                                   \
    for (; i + tile_rows <= m; i += tile_rows)                                          \
        register_tile_##SUFFIX(a + i * a_row, a_row, a_col, b, b_row, c + i * c_row,    \
                               c_row, k, tile_rows, width, accumulate);                 \
    const T *rest_a = a + i * a_row;                                                    \
    T *rest_c = c + i * c_row;                                                          \
    switch (m - i) {                        /* constant row counts: unrolled */         \
    LAST_TILE(SUFFIX, 9) LAST_TILE(SUFFIX, 8) LAST_TILE(SUFFIX, 7) LAST_TILE(SUFFIX, 6) \
    LAST_TILE(SUFFIX, 5) LAST_TILE(SUFFIX, 4) LAST_TILE(SUFFIX, 3) LAST_TILE(SUFFIX, 2) \
    LAST_TILE(SUFFIX, 1)                                                                \
    default: break;                                                                     \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* The column strips of c, `tile_rows` rows per register tile. */                      \
static inline __attribute__((always_inline)) void                                       \
column_strips_##SUFFIX(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,         \
                       const T *restrict b, Py_ssize_t b_row, T *restrict c,            \
                       Py_ssize_t c_row, Py_ssize_t m, Py_ssize_t k, Py_ssize_t n,      \
                       int accumulate, int tile_rows)                                   \
{                                                                                       \
    Py_ssize_t j = 0;                                                                   \
    for (; j + 2 * (LANES) <= n; j += 2 * (LANES))                                      \
        column_strip_##SUFFIX(a, a_row, a_col, b + j, b_row, c + j, c_row, m, k, 2,     \
                              accumulate, tile_rows);                                   \
    if (j + (LANES) <= n)                   /* one vector of columns left */            \
        column_strip_##SUFFIX(a, a_row, a_col, b + j, b_row, c + j, c_row, m, k, 1,     \
                              accumulate, tile_rows);                                   \
}                                                                                       \
                                                                                        \
CPU_CLONES                                                                              \
static void gemm_##SUFFIX(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,      \
                          const T *restrict b, Py_ssize_t b_row, T *restrict c,         \
                          Py_ssize_t c_row, Py_ssize_t m, Py_ssize_t k, Py_ssize_t n,   \
                          int accumulate)                                               \
{                                                                                       \
    /* each row tile reads all of b: the fewest tiles, and at a tie tiles of 8 rows   \
     * (32 channels: 4 x 8 rows ran at 230 GFLOP/s, 3 x 10 + 2 at 175) */             \
    if ((m + 7) / 8 <= (m + WIDE_GEMM_ROWS - 1) / WIDE_GEMM_ROWS)                       \
        column_strips_##SUFFIX(a, a_row, a_col, b, b_row, c, c_row, m, k, n, accumulate, 8); \
    else                                                                                \
        column_strips_##SUFFIX(a, a_row, a_col, b, b_row, c, c_row, m, k, n, accumulate, \
                               WIDE_GEMM_ROWS);                                         \
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
        STORE_TWO(vec_##SUFFIX, (LANES), c + r * c_row, acc[r][0], acc[r][1]);          \
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

/* The 36 GEMMs for native_winograd.c's loops over blocks of images (kind 'f' or
 * 'd'; the GIL already released). */
void winograd_gemms_of(char kind, const void *u, const void *w, void *m, Py_ssize_t first,
                       Py_ssize_t tiles, Py_ssize_t c, Py_ssize_t o, int sums)
{
    if (kind == 'f')
        winograd_gemms_f32(u, w, m, first, tiles, c, o, sums);
    else
        winograd_gemms_f64(u, w, m, first, tiles, c, o, sums);
}

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
    RUN_WITHOUT_GIL(kind, winograd_gemms, u, w, m, first, tiles, c, o, sums);
    release_all(&views);
    Py_RETURN_NONE;
}

/* gemm_##SUFFIX's unpacked loops beat the blocked kernel (by 1.2-1.8x, see
 * benchmarks/dense_gemm.py) on the convolutions' narrow products: up to 4 vectors of
 * columns (64 float32) and b small enough to stay in half the 1 MiB L2 (its rows are
 * read once per 6 rows of a): there packing a costs more than it saves. With a 1 MiB
 * b (a 320 x 4096^T @ 4096 x 64 filter gradient) the blocked kernel won, 178 to 143
 * GFLOP/s. A deeper a^T @ b (a filter gradient over a whole batch of rows) of up to 2
 * vectors of columns runs unpacked in chunks of b's rows that fit, adding each
 * chunk's products into c: 27 x 32768^T @ 32768 x 32 (the cifar10 stem's, one
 * thread) 125 -> 190 GFLOP/s, 288 x 8192 x 32 167 -> 191; with 4 vectors of columns
 * the blocked kernel still won (320 x 4096 x 64: 186 to 167). */
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
        /* NOTE: chosen by the whole product's width n, never the block's: a split  \
         * product's blocks then sum each element in the whole one's order. */      \
        const int narrow = !(g).transpose_b && (g).columns % (LANES) == 0               \
            && (g).n % (LANES) == 0 && (g).n > 0                                        \
            && (g).n <= UNPACKED_MAX_VECTORS * (LANES);                                 \
        /* the inner rows whose B rows fit UNPACKED_MAX_B_BYTES */                      \
        const Py_ssize_t chunk = narrow ? UNPACKED_MAX_B_BYTES                          \
                                 / ((g).n * (Py_ssize_t)sizeof(T)) : 0;                 \
        if (narrow && (g).k <= chunk)                                                   \
            gemm_##SUFFIX(a_, a_row, a_col, b_, b_row, c_, (g).n, (g).rows, (g).k,      \
                          (g).columns, 0);                                              \
        else if (narrow && (g).transpose_a && (g).n <= 2 * (LANES))                     \
            /* a deep a^T @ b of up to 2 vectors of columns: in chunks of inner rows */ \
            for (Py_ssize_t k0 = 0; k0 < (g).k; k0 += chunk)                            \
                gemm_##SUFFIX(a_ + k0 * a_col, a_row, a_col, b_ + k0 * b_row, b_row, c_, \
                              (g).n, (g).rows, (g).k - k0 < chunk ? (g).k - k0 : chunk, \
                              (g).columns, k0 > 0);                                     \
        else                                                                            \
            status = blocked_gemm_##SUFFIX(a_, a_row, a_col, b_, b_row, b_col, c_,      \
                                           (g).n, (g).rows, (g).k, (g).columns);        \
    } while (0)

/* gemm_vectorised(): whether the GEMMs run on 64-byte vectors in registers. Their
 * vectors are 16 float32 wide: on a CPU without AVX-512 (their AVX2 and default
 * clones), or built without the clones, GCC moves them through memory in pieces,
 * and they ran at 2-3 GFLOP/s, 40x slower than OpenBLAS; native.py leaves every
 * GEMM to NumPy there. */
PyObject *py_gemm_vectorised(PyObject *self, PyObject *args)
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

typedef struct {
    Task task;
    char kind;
    void *a, *b, *c;
    GemmGeometry g;
} GemmCall;

static void run_gemm(Task *task)
{
    GemmCall *call = (GemmCall *)task;
    int status = 0;
    if (call->kind == 'f')
        RUN_GEMM(float, f32, 16, call->g, call->a, call->b, call->c, status);
    else
        RUN_GEMM(double, f64, 8, call->g, call->a, call->b, call->c, status);
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
    if (!kind)
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
    call->g = g;
    return submit(&call->task);
}
