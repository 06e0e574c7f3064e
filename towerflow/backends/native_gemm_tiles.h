/* The GEMM kernels of one vector path and one dtype: included by native_gemm_path.h
 * (for native_gemm_avx512.c and native_gemm_avx2.c) once per dtype, with these
 * defined:
 *   ISA             the path's name in the functions' names (avx512, avx2)
 *   VECTOR_BYTES    a vector register's bytes (64, 32)
 *   WIDE_GEMM_ROWS  the unpacked kernel's most rows per register tile (see gemm)
 *   SHORT_GEMM_ROWS its other tile height, taken where it makes no more tiles
 *   T, SUFFIX, INDEX  the element type, its name (f32, f64), an integer as wide
 * The including file selects the instructions (#pragma GCC target) for all of it.
 * No include guard: each inclusion defines another set of functions.
 *
 * Each set has two entry points (named KERNEL(name): name_ISA_SUFFIX):
 *   run_gemm        a block of c = op(a) @ op(b) (see native_gemm.c's GemmGeometry)
 *   winograd_gemms  Winograd's 36 tile products of a block of tiles
 * Every element's sum runs over p in the same order on every call and thread: the
 * results are the same bits run after run and on any thread, for one path (the
 * paths' bits may differ in the last place). */

#define GLUE_(name, isa, suffix) name##_##isa##_##suffix
#define GLUE(name, isa, suffix) GLUE_(name, isa, suffix)
#define KERNEL(name) GLUE(name, ISA, SUFFIX)
#define LANES ((int)(VECTOR_BYTES / sizeof(T)))
#define VEC KERNEL(vec)
#define INDEX_VEC KERNEL(index_vec)

/* A vector of LANES items at any address of a T (may_alias: it reads and writes
 * arrays of T). NOTE: loads and stores go through this type, not memcpy: under the
 * AVX2 target pragma GCC 12 copied each memcpy'd vector in 16-byte pieces through the
 * stack, and the AVX2 kernels ran at 18-20 GFLOP/s instead of 100. */
typedef T VEC __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)), may_alias));
typedef INDEX INDEX_VEC __attribute__((vector_size(VECTOR_BYTES)));

static inline __attribute__((always_inline)) VEC KERNEL(load)(const T *from)
{
    return *(const VEC *)from;
}

static inline __attribute__((always_inline)) void KERNEL(put)(T *to, VEC value)
{
    *(VEC *)to = value;
}

/* *out = value, or *out += value with accumulate. */
static inline __attribute__((always_inline)) void
KERNEL(store)(T *out, VEC value, int accumulate)
{
    if (accumulate)
        value += KERNEL(load)(out);
    KERNEL(put)(out, value);
}

/* -- the unpacked kernel: Winograd's products and the convolutions' narrow ones ---- */

/* Winograd's term-by-term products (m[t] = u[t] @ v[t] for the 36 terms t, and the
 * filter gradient's sums u[t]^T @ e[t]) are GEMMs with short inner dimensions (32 to
 * 128 channels): OpenBLAS reaches about half of a core's float32 peak on them,
 * through NumPy's stacked matmul. This kernel holds a register tile of `rows` rows of
 * a times two vectors of b's columns in registers and runs rank-1 updates along p,
 * b's rows streamed straight from memory. With AVX-512's 32 registers a tile has up to
 * 10 rows (20 accumulators): each b vector loaded meets 10 rows instead of 6. On the
 * cifar10 network's Winograd GEMMs (one core; [tiles, 36, C] by [36, C, O] for C, O
 * of 32 to 128) the filter gradient's products went from 138-168 to 199-240 GFLOP/s
 * and the forward ones from 170-216 to 193-239. AVX2's 16 registers hold 6 rows (12
 * accumulators, two b vectors and the broadcast a value). */

/* c(i, j) (+)= sum_p a(i, p) b(p, j) for i < rows, j < width vectors:
 * a(i, p) = a[i * a_row + p * a_col], b(p, j) = b[p * b_row + j], c(i, j) =
 * c[i * c_row + j]; rows (at most WIDE_GEMM_ROWS) and width (1 or 2) are constants
 * where inlined, so that the loops unroll into registers. */
static inline __attribute__((always_inline)) void
KERNEL(register_tile)(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,
                      const T *restrict b, Py_ssize_t b_row, T *restrict c,
                      Py_ssize_t c_row, Py_ssize_t k, int rows, int width, int accumulate)
{
    VEC acc[WIDE_GEMM_ROWS][2];
    memset(acc, 0, sizeof acc);
    for (Py_ssize_t p = 0; p < k; p++) {
        const VEC b0 = KERNEL(load)(b + p * b_row);
        const VEC b1 = width == 2 ? KERNEL(load)(b + p * b_row + LANES) : b0;
        for (int r = 0; r < rows; r++) {
            const T s = a[r * a_row + p * a_col];
            acc[r][0] += s * b0;
            if (width == 2)
                acc[r][1] += s * b1;
        }
    }
    for (int r = 0; r < rows; r++) {
        KERNEL(store)(c + r * c_row, acc[r][0], accumulate);
        if (width == 2)
            KERNEL(store)(c + r * c_row + LANES, acc[r][1], accumulate);
    }
}

/* Rows 0..m-1 of one column strip (`width` vectors of columns): whole register tiles
 * of `tile_rows` rows (a constant where inlined), then the last m % tile_rows rows as
 * tiles of 8, 4, 2 and 1 rows (one row at a time, they took a fifth of the time of a
 * 16-row product). NOTE: one tile per remaining row count, 1 to 9, unrolled each,
 * made this file cost 3x the compiler time for no measurable speed: the rest is a
 * small part of a strip, and in Winograd's filter gradient (m = channels) there is
 * none. */
static inline __attribute__((always_inline)) void
KERNEL(column_strip)(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,
                     const T *restrict b, Py_ssize_t b_row, T *restrict c, Py_ssize_t c_row,
                     Py_ssize_t m, Py_ssize_t k, int width, int accumulate, int tile_rows)
{
    Py_ssize_t i = 0;
    for (; i + tile_rows <= m; i += tile_rows)
        KERNEL(register_tile)(a + i * a_row, a_row, a_col, b, b_row, c + i * c_row, c_row,
                              k, tile_rows, width, accumulate);
#define REST_TILE(rows)                                                                 \
    if (m - i >= (rows)) {                                                              \
        KERNEL(register_tile)(a + i * a_row, a_row, a_col, b, b_row, c + i * c_row,      \
                              c_row, k, (rows), width, accumulate);                     \
        i += (rows);                                                                    \
    }
#if WIDE_GEMM_ROWS > 8
    if (tile_rows > 8)
        REST_TILE(8)
#endif
    REST_TILE(4)
    REST_TILE(2)
    REST_TILE(1)
#undef REST_TILE
}

/* The column strips of c, `tile_rows` rows per register tile. */
static inline __attribute__((always_inline)) void
KERNEL(column_strips)(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col,
                      const T *restrict b, Py_ssize_t b_row, T *restrict c,
                      Py_ssize_t c_row, Py_ssize_t m, Py_ssize_t k, Py_ssize_t n,
                      int accumulate, int tile_rows)
{
    Py_ssize_t j = 0;
    for (; j + 2 * LANES <= n; j += 2 * LANES)
        KERNEL(column_strip)(a, a_row, a_col, b + j, b_row, c + j, c_row, m, k, 2,
                             accumulate, tile_rows);
    if (j + LANES <= n)                     /* one vector of columns left */
        KERNEL(column_strip)(a, a_row, a_col, b + j, b_row, c + j, c_row, m, k, 1,
                             accumulate, tile_rows);
}

/* c (+)= a @ b, c [m, n] (n a multiple of LANES: native.py and the entry points refuse
 * other widths, a scalar loop for the last few columns ran at a tenth of OpenBLAS's
 * speed); strides as in register_tile. */
static void
KERNEL(gemm)(const T *restrict a, Py_ssize_t a_row, Py_ssize_t a_col, const T *restrict b,
             Py_ssize_t b_row, T *restrict c, Py_ssize_t c_row, Py_ssize_t m, Py_ssize_t k,
             Py_ssize_t n, int accumulate)
{
    /* each row tile reads all of b: the fewest tiles, and at a tie the shorter tiles
     * (32 channels on AVX-512: 4 x 8 rows ran at 230 GFLOP/s, 3 x 10 + 2 at 175) */
    if ((m + SHORT_GEMM_ROWS - 1) / SHORT_GEMM_ROWS <= (m + WIDE_GEMM_ROWS - 1) / WIDE_GEMM_ROWS)
        KERNEL(column_strips)(a, a_row, a_col, b, b_row, c, c_row, m, k, n, accumulate,
                              SHORT_GEMM_ROWS);
    else
        KERNEL(column_strips)(a, a_row, a_col, b, b_row, c, c_row, m, k, n, accumulate,
                              WIDE_GEMM_ROWS);
}

/* The 36 GEMMs of one block of tiles: u holds [plane_tiles, 36, C] transformed
 * inputs, the block its tiles first .. first + tiles - 1 (a block small enough
 * to stay in cache: a term's rows are 36 * C apart).
 * sums 0: m[tiles, 36, O], m[:, t] = u_block[:, t] @ w[t], w [36, C, O] (the
 * forward pass); sums 1: m[36, C, O], m[t] += u_block[:, t]^T @ w[:, t], w
 * [tiles, 36, O] (the filter gradient's sums, added block after block). */
void KERNEL(winograd_gemms)(const void *u_, const void *w_, void *m_, Py_ssize_t first,
                            Py_ssize_t tiles, Py_ssize_t c, Py_ssize_t o, int sums)
{
    const T *u = u_, *w = w_;
    T *m = m_;
    for (int t = 0; t < 36; t++) {
        const T *block = u + (first * 36 + t) * c;
        if (sums)
            KERNEL(gemm)(block, 1, 36 * c, w + t * o, 36 * o, m + t * c * o, o, c, tiles,
                         o, 1);
        else
            KERNEL(gemm)(block, 36 * c, 1, w + t * c * o, o, m + t * o, 36 * o, tiles, c,
                         o, 0);
    }
}

/* -- the blocked GEMM (MatMul and its gradients; see native.gemm) ---------------------- */

/* gemm above streams b's rows straight from memory and runs each dot product over the
 * whole inner dimension: fast where that dimension is short, but on deep ones (a dense
 * layer's 3,136 inputs) b's rows leave the caches before they are used again, and rows
 * 4 KiB apart (1,024 float32 columns) all fall into one L1 set. This one is blocked the
 * way GotoBLAS / BLIS are: the inner dimension in blocks of BLOCK_K, b packed block by
 * block into panels of 2 vectors of columns (BLOCK_K rows, contiguous: no aliasing,
 * prefetch friendly, and a transposed b costs nothing more), a packed into panels of
 * GEMM_ROWS rows (BLOCK_M rows at a time), and a 6 x 2-vector register tile (12
 * accumulators: it fits AVX2's 16 registers too). Panels are padded with zeros, so any
 * width and height is taken; an edge tile is computed into a local tile and its valid
 * part copied. Every element's sum runs over the blocks of p in order, p in order
 * within a block: the bits do not depend on the thread or on how the caller splits
 * rows or columns. The block sizes are native_gemm.h's. */

/* ap[panel][p][r] = a(i0 + panel * GEMM_ROWS + r, p0 + p), zeros past row m; a
 * transposed a (a_row 1) is read along its rows, the others along p. */
static inline __attribute__((always_inline)) void
KERNEL(pack_a)(const T *a, Py_ssize_t a_row, Py_ssize_t a_col, Py_ssize_t rows,
               Py_ssize_t kc, T *restrict ap)
{
    for (Py_ssize_t i = 0; i < rows; i += GEMM_ROWS, ap += GEMM_ROWS * kc) {
        const Py_ssize_t valid = rows - i < GEMM_ROWS ? rows - i : GEMM_ROWS;
        if (a_row == 1 && valid == GEMM_ROWS)
            for (Py_ssize_t p = 0; p < kc; p++)
                memcpy(ap + p * GEMM_ROWS, a + i + p * a_col, GEMM_ROWS * sizeof(T));
        else
            for (int r = 0; r < GEMM_ROWS; r++)
                for (Py_ssize_t p = 0; p < kc; p++)
                    ap[p * GEMM_ROWS + r] = r < valid ? a[(i + r) * a_row + p * a_col] : 0;
    }
}

/* The LANES x LANES block of vectors r transposed in place: for h = LANES / 2 .. 1,
 * the off-diagonal h x h blocks of every 2h x 2h block swap places (2 shuffles per
 * pair of rows: 4 x 16 two-vector shuffles for float32 on AVX-512 instead of 256 scalar
 * stores, which held a transposed b's packing to 1 item per cycle). */
static inline __attribute__((always_inline)) void
KERNEL(transpose)(VEC r[LANES])
{
    _Pragma("GCC unroll 4")
    for (int h = LANES / 2; h >= 1; h /= 2) {
        INDEX_VEC low, high;
        _Pragma("GCC unroll 16")
        for (int c = 0; c < LANES; c++) {
            low[c] = (c & h) ? LANES + c - h : c;
            high[c] = (c & h) ? LANES + c : c + h;
        }
        _Pragma("GCC unroll 16")
        for (int i = 0; i < LANES; i++)
            if (!(i & h)) {
                const VEC x = r[i], y = r[i + h];
                r[i] = __builtin_shuffle(x, y, low);
                r[i + h] = __builtin_shuffle(x, y, high);
            }
    }
}

/* The panel bp[p][v] = b[(j + v) * b_col + p] of a transposed b: LANES x LANES
 * blocks read as vectors along p, transposed in registers, stored along v. */
static inline __attribute__((always_inline)) void
KERNEL(pack_transposed_panel)(const T *b, Py_ssize_t b_col, Py_ssize_t kc, T *restrict bp)
{
    const Py_ssize_t wide = 2 * LANES, whole = kc / LANES * LANES;
    for (Py_ssize_t v0 = 0; v0 < wide; v0 += LANES)
        for (Py_ssize_t p0 = 0; p0 < whole; p0 += LANES) {
            VEC r[LANES];
            _Pragma("GCC unroll 16")
            for (int v = 0; v < LANES; v++)
                r[v] = KERNEL(load)(b + (v0 + v) * b_col + p0);
            KERNEL(transpose)(r);
            _Pragma("GCC unroll 16")
            for (int p = 0; p < LANES; p++)
                KERNEL(put)(bp + (p0 + p) * wide + v0, r[p]);
        }
    for (Py_ssize_t p = whole; p < kc; p++)
        for (Py_ssize_t v = 0; v < wide; v++)
            bp[p * wide + v] = b[v * b_col + p];
}

/* bp[panel][p][v] = b(p0 + p, j0 + panel * 2 * LANES + v), zeros past column n.
 * b read along its rows (one stream: panel by panel, rows 4 KiB apart took a TLB
 * miss each); a transposed b panel by panel. */
static inline __attribute__((always_inline)) void
KERNEL(pack_b)(const T *b, Py_ssize_t b_row, Py_ssize_t b_col, Py_ssize_t kc,
               Py_ssize_t columns, T *restrict bp)
{
    const Py_ssize_t wide = 2 * LANES, whole = columns / wide * wide;
    const Py_ssize_t panel = wide * kc + PANEL_PAD;
    if (b_col == 1)
        for (Py_ssize_t p = 0; p < kc; p++)
            for (Py_ssize_t j = 0; j < whole; j += wide)
                memcpy(bp + j / wide * panel + p * wide, b + p * b_row + j, wide * sizeof(T));
    else
        for (Py_ssize_t j = 0; j < whole; j += wide)
            KERNEL(pack_transposed_panel)(b + j * b_col, b_col, kc, bp + j / wide * panel);
    if (whole < columns)
        for (Py_ssize_t p = 0; p < kc; p++)
            for (Py_ssize_t v = 0; v < wide; v++)
                bp[whole / wide * panel + p * wide + v] =
                    whole + v < columns ? b[p * b_row + (whole + v) * b_col] : 0;
}

/* c[r * c_row + v] (+)= sum_p ap[p][r] * bp[p][v], r < GEMM_ROWS, v < 2 * LANES. */
static inline __attribute__((always_inline)) void
KERNEL(tile)(Py_ssize_t kc, const T *restrict ap, const T *restrict bp, T *restrict c,
             Py_ssize_t c_row, int accumulate)
{
    VEC acc[GEMM_ROWS][2];
    memset(acc, 0, sizeof acc);
    for (Py_ssize_t p = 0; p < kc; p++, ap += GEMM_ROWS, bp += 2 * LANES) {
        const VEC b0 = KERNEL(load)(bp), b1 = KERNEL(load)(bp + LANES);
        for (int r = 0; r < GEMM_ROWS; r++) {
            acc[r][0] += ap[r] * b0;
            acc[r][1] += ap[r] * b1;
        }
    }
    for (int r = 0; r < GEMM_ROWS; r++) {
        KERNEL(store)(c + r * c_row, acc[r][0], accumulate);
        KERNEL(store)(c + r * c_row + LANES, acc[r][1], accumulate);
    }
}

/* The tile at c, of rows x columns valid items (at most GEMM_ROWS x 2 * LANES). */
static inline __attribute__((always_inline)) void
KERNEL(edge_tile)(Py_ssize_t kc, const T *ap, const T *bp, T *c, Py_ssize_t c_row,
                  Py_ssize_t rows, Py_ssize_t columns, int accumulate)
{
    if (rows == GEMM_ROWS && columns == 2 * LANES) {
        KERNEL(tile)(kc, ap, bp, c, c_row, accumulate);
        return;
    }
    T local[GEMM_ROWS * 2 * LANES];
    KERNEL(tile)(kc, ap, bp, local, 2 * LANES, 0);
    for (Py_ssize_t r = 0; r < rows; r++)
        for (Py_ssize_t v = 0; v < columns; v++)
            c[r * c_row + v] = (accumulate ? c[r * c_row + v] : 0) + local[r * 2 * LANES + v];
}

/* c[m, n] (row stride c_row) = a @ b, a(i, p) = a[i * a_row + p * a_col], b(p, j) =
 * b[p * b_row + j * b_col]; 0 on success, -1 when the packing buffer is refused. */
static int
KERNEL(blocked_gemm)(const T *a, Py_ssize_t a_row, Py_ssize_t a_col, const T *b,
                     Py_ssize_t b_row, Py_ssize_t b_col, T *c, Py_ssize_t c_row,
                     Py_ssize_t m, Py_ssize_t k, Py_ssize_t n)
{
    const Py_ssize_t wide = 2 * LANES;
    const Py_ssize_t b_panel = (BLOCK_K * wide + PANEL_PAD) * ((BLOCK_N + wide - 1) / wide);
    T *bp = gemm_packing_buffer((b_panel + BLOCK_K * (BLOCK_M + GEMM_ROWS)) * sizeof(T));
    if (!bp)
        return -1;
    T *ap = bp + b_panel;
    if (k == 0)
        for (Py_ssize_t i = 0; i < m; i++)
            memset(c + i * c_row, 0, n * sizeof(T));
    for (Py_ssize_t j0 = 0; j0 < n; j0 += BLOCK_N) {
        const Py_ssize_t nc = n - j0 < BLOCK_N ? n - j0 : BLOCK_N;
        for (Py_ssize_t p0 = 0; p0 < k; p0 += BLOCK_K) {
            const Py_ssize_t kc = k - p0 < BLOCK_K ? k - p0 : BLOCK_K;
            KERNEL(pack_b)(b + p0 * b_row + j0 * b_col, b_row, b_col, kc, nc, bp);
            for (Py_ssize_t i0 = 0; i0 < m; i0 += BLOCK_M) {
                const Py_ssize_t mc = m - i0 < BLOCK_M ? m - i0 : BLOCK_M;
                KERNEL(pack_a)(a + i0 * a_row + p0 * a_col, a_row, a_col, mc, kc, ap);
                for (Py_ssize_t j = 0; j < nc; j += wide)
                    for (Py_ssize_t i = 0; i < mc; i += GEMM_ROWS)
                        KERNEL(edge_tile)(kc, ap + i * kc, bp + j / wide * (wide * kc + PANEL_PAD),
                                          c + (i0 + i) * c_row + j0 + j, c_row,
                                          mc - i < GEMM_ROWS ? mc - i : GEMM_ROWS,
                                          nc - j < wide ? nc - j : wide, p0 > 0);
            }
        }
    }
    return 0;
}

/* -- the entry: which kernel a product runs on ------------------------------------------ */

/* The block of c = op(a) @ op(b) that g names; 0, or -1 when the packing buffer is
 * refused. The unpacked kernel takes products whose columns (b's rows) fit
 * UNPACKED_MAX_BYTES and whose b stays in half the L2 (see native_gemm.h); a deeper
 * a^T @ b of up to UNPACKED_DEEP_BYTES of columns runs unpacked in chunks of inner
 * rows, each chunk's products added into c; the rest runs blocked. */
int KERNEL(run_gemm)(const GemmGeometry *g, const void *a, const void *b, void *c)
{
    const Py_ssize_t a_row = g->transpose_a ? 1 : g->k, a_col = g->transpose_a ? g->m : 1;
    const Py_ssize_t b_row = g->transpose_b ? 1 : g->n, b_col = g->transpose_b ? g->k : 1;
    const T *a_ = (const T *)a + g->first_row * a_row;
    const T *b_ = (const T *)b + g->first_column * b_col;
    T *c_ = (T *)c + g->first_row * g->n + g->first_column;
    /* NOTE: chosen by the whole product's width n, never the block's: a split
     * product's blocks then sum each element in the whole one's order. */
    const int narrow = !g->transpose_b && g->columns % LANES == 0 && g->n % LANES == 0
        && g->n > 0 && g->n * (Py_ssize_t)sizeof(T) <= UNPACKED_MAX_BYTES;
    /* the inner rows whose b rows fit UNPACKED_MAX_B_BYTES */
    const Py_ssize_t chunk = narrow ? UNPACKED_MAX_B_BYTES / (g->n * (Py_ssize_t)sizeof(T)) : 0;
    if (narrow && g->k <= chunk)
        KERNEL(gemm)(a_, a_row, a_col, b_, b_row, c_, g->n, g->rows, g->k, g->columns, 0);
    else if (narrow && g->transpose_a && g->n * (Py_ssize_t)sizeof(T) <= UNPACKED_DEEP_BYTES)
        for (Py_ssize_t k0 = 0; k0 < g->k; k0 += chunk)
            KERNEL(gemm)(a_ + k0 * a_col, a_row, a_col, b_ + k0 * b_row, b_row, c_, g->n,
                         g->rows, g->k - k0 < chunk ? g->k - k0 : chunk, g->columns, k0 > 0);
    else
        return KERNEL(blocked_gemm)(a_, a_row, a_col, b_, b_row, b_col, c_, g->n, g->rows,
                                    g->k, g->columns);
    return 0;
}

#undef INDEX_VEC
#undef VEC
#undef LANES
#undef KERNEL
#undef GLUE
#undef GLUE_
