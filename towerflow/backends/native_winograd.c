/* Winograd's transforms, F(4x4, 3x3) and F(2x2, 5x5), and their entry points
 * (the 36 GEMMs between them are native_gemm.c's). */
#include "native_common.h"

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
    Py_ssize_t tile;          /* outputs per tile side: 4 (F(4x4, 3x3)) or 2 (F(2x2, 5x5)) */
} WinogradGeometry;

/* Tiles of `tile` outputs covering `size` outputs (no overflow near the max). */
#define TILES_OF(size, tile) ((size) / (tile) + ((size) % (tile) != 0))
#define WINOGRAD_TILE(tile) ((tile) == 4 || (tile) == 2)    /* the two algorithms' */

/* The loops over every tile (img, ty, tx) of n images of th x tw tiles (tile: its
 * number, image by image, row by row) and every block of at most BLOCK of the c
 * channels (c0 on, cb of them): the loop nest of every transform below. */
#define FOR_EACH_TILE(n, th, tw, c)                                                     \
    for (Py_ssize_t img = 0; img < (n); img++)                                          \
    for (Py_ssize_t ty = 0; ty < (th); ty++)                                            \
    for (Py_ssize_t tx = 0, tile = (img * (th) + ty) * (tw); tx < (tw); tx++, tile++)   \
    for (Py_ssize_t c0 = 0, cb = (c) < BLOCK ? (c) : BLOCK; c0 < (c);                   \
         c0 += BLOCK, cb = (c) - c0 < BLOCK ? (c) - c0 : BLOCK)

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
CPU_CLONES static void winograd_input_##SUFFIX(const T *restrict x, T *restrict u,               \
                                    const WinogradGeometry *g)                          \
{                                                                                       \
    const Py_ssize_t c = g->c, th = TILES_OF(g->oh, g->tile);                           \
    const Py_ssize_t tw = TILES_OF(g->ow, g->tile);                                     \
    const Py_ssize_t plane = c;         /* from one term to the next */                 \
    u += g->first_tile * 36 * c;                                                        \
    FOR_EACH_TILE(g->n, th, tw, c) {                                                    \
        T d[6][6][BLOCK], t[6][6][BLOCK];                                               \
        const Py_ssize_t row0 = ty * g->tile - g->top, col0 = tx * g->tile - g->left;   \
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
}

/* The output side of a tile of TILE x TILE outputs (TILE 4: F(4x4, 3x3), whose
 * transforms are A_T and A_; TILE 2: F(2x2, 5x5), with A2_T and A2_): FUNCTIONS
 * names the pair, e.g. t4_f32. The input side, winograd_input, is the same for
 * both (the same 6x6 B^T), only its tile step differs. */
#define DEFINE_WINOGRAD_TILES(T, FUNCTIONS, SUFFIX, TILE, AT_OF, A_OF)                  \
/* v[N * TH * TW, 36, O] = A e A^T of every TILE x TILE tile e of the output            \
 * gradient (zeros past its edge): the filter gradient of a tile is G^T [(A e           \
 * A^T) * (B^T d B)] G, the forward pass's transpose. */                                \
CPU_CLONES static void winograd_grad_tiles_##FUNCTIONS(const T *restrict grad,          \
                                                      T *restrict v,                    \
                                                      const WinogradGeometry *g)        \
{                                                                                       \
    const Py_ssize_t o = g->c, th = TILES_OF(g->oh, TILE), tw = TILES_OF(g->ow, TILE);  \
    const Py_ssize_t plane = o;         /* from one term to the next */                 \
    FOR_EACH_TILE(g->n, th, tw, o) {                                                    \
        T e[TILE][TILE][BLOCK], t[6][TILE][BLOCK];                                      \
        const T *image = grad + img * g->oh * g->ow * o + c0;                           \
        if ((ty + 1) * TILE <= g->oh && (tx + 1) * TILE <= g->ow) {                     \
            /* inside the gradient: read the tile in place, no copy */                  \
            const T *window = image + (ty * TILE * g->ow + tx * TILE) * o;              \
            const Py_ssize_t image_w = g->ow, c = o;                                    \
            for (int j = 0; j < TILE; j++) {                                            \
                _Pragma("GCC ivdep")                                                    \
                A_OF(T, X_COL, TE_COL, cb)                                              \
            }                                                                           \
        } else {                                                                        \
            load_tile_##SUFFIX(image, g->oh, g->ow, o, ty * TILE, tx * TILE, TILE, cb,  \
                               &e[0][0][0]);                                            \
            for (int j = 0; j < TILE; j++) {                                            \
                _Pragma("GCC ivdep")                                                    \
                A_OF(T, E_COL, TE_COL, cb)                                              \
            }                                                                           \
        }                                                                               \
        for (int i = 0; i < 6; i++) {                                                   \
            T *out = v + tile * 36 * o + (i * 6) * plane + c0;                          \
            _Pragma("GCC ivdep")                                                        \
            A_OF(T, TE_ROW, U_ROW, cb)                                                  \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* y[N, OH, OW, O] = A^T m A of every tile, m[N * TH * TW, 36, O] (the GEMMs'           \
 * output); a tile's rows and columns past the output's edge are dropped. */            \
CPU_CLONES static void winograd_output_##FUNCTIONS(const T *restrict m, T *restrict y,  \
                                                  const WinogradGeometry *g)            \
{                                                                                       \
    const Py_ssize_t o = g->c, th = TILES_OF(g->oh, TILE), tw = TILES_OF(g->ow, TILE);  \
    const Py_ssize_t plane = o;         /* from one term to the next */                 \
    FOR_EACH_TILE(g->n, th, tw, o) {                                                    \
        T t[TILE][6][BLOCK], r[TILE][TILE][BLOCK];                                      \
        for (int j = 0; j < 6; j++) {                                                   \
            const T *in = m + tile * 36 * o + j * plane + c0;                           \
            _Pragma("GCC ivdep")                                                        \
            AT_OF(T, M_COL, TM_COL, cb)                                                 \
        }                                                                               \
        for (int i = 0; i < TILE; i++) {                                                \
            _Pragma("GCC ivdep")                                                        \
            AT_OF(T, TM_ROW, R_ROW, cb)                                                 \
        }                                                                               \
        for (int i = 0; i < TILE && ty * TILE + i < g->oh; i++)                         \
            for (int j = 0; j < TILE && tx * TILE + j < g->ow; j++) {                   \
                T *p = y + ((img * g->oh + ty * TILE + i) * g->ow + tx * TILE + j) * o + c0; \
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
DEFINE_WINOGRAD_TILES(float, t4_f32, f32, 4, A_T, A_)
DEFINE_WINOGRAD_TILES(double, t4_f64, f64, 4, A_T, A_)

/* -- Winograd F(2x2, 5x5) ------------------------------------------------------------ */

/* A stride-1 5x5 convolution in tiles of 2x2 outputs, with the interpolation
 * points of F(4x4, 3x3) (0, 1, -1, 2, -2 and infinity): n = m + r - 1 = 6 again,
 * so the input transform B^T and the 36 GEMMs are F(4x4, 3x3)'s; the tiles step
 * by 2 (their 6x6 windows overlap by 4), A^T is 2x6 (the points' powers 0 and
 * 1) and G 6x5 (winograd.py). 36 multiplies per 4 outputs instead of 100. */

/* y = A^T m along one axis: m is 6 vectors of cb, y 2. */
#define A2_T(T, m, y, cb)                                                               \
    for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                          \
        const T m0 = m(0), m1 = m(1), m2 = m(2), m3 = m(3), m4 = m(4), m5 = m(5);        \
        y(0) = m0 + (m1 + m2) + (m3 + m4);                                              \
        y(1) = (m1 - m2) + 2 * (m3 - m4) + m5;                                          \
    }

/* t = A e along one axis: e is 2 vectors of cb, t 6. */
#define A2_(T, e, t, cb)                                                                \
    for (Py_ssize_t ch = 0; ch < (cb); ch++) {                                          \
        const T e0 = e(0), e1 = e(1), two1 = 2 * e1;                                   \
        t(0) = e0;                                                                      \
        t(1) = e0 + e1;                                                                 \
        t(2) = e0 - e1;                                                                 \
        t(3) = e0 + two1;                                                               \
        t(4) = e0 - two1;                                                               \
        t(5) = e1;                                                                      \
    }

DEFINE_WINOGRAD_TILES(float, t2_f32, f32, 2, A2_T, A2_)
DEFINE_WINOGRAD_TILES(double, t2_f64, f64, 2, A2_T, A2_)

/* -- blocks of images in one call ------------------------------------------------------ */

/* A thread's part of a convolution, or of its filter gradient, block after block of
 * `block` images (sized by the caller to stay in cache): the transforms and the 36
 * GEMMs of each block in one call, where a Python loop over the blocks cost 8 us of
 * interpreter time per block (64 blocks per layer at batch 64 for a 32x32 image with
 * 32 channels), taken under the GIL, which the threads' parts then waited for. */
typedef struct {
    WinogradGeometry part;    /* the part's n images; with kept tiles, their tiles from
                               * first_tile on in the kept array's plane_tiles */
    Py_ssize_t o, block;      /* output channels, images per block */
    int kept;                 /* the transformed inputs are kept (for the filter gradient) */
} PartBlocks;

/* dst[0 .. count) = src by non-temporal stores (SSE2, on every x86-64): the kept
 * tiles are read again only in the backward pass, so writing them through the
 * caches made every line be read from memory first (for its ownership) and pushed
 * out the cached data of the blocks to come. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define STREAM_COPY(T, SUFFIX, LANES, STORE, LOAD)                                      \
static void stream_copy_##SUFFIX(T *dst, const T *src, Py_ssize_t count)                \
{                                                                                       \
    Py_ssize_t i = 0;                                                                   \
    for (; i < count && ((uintptr_t)(dst + i) & 15); i++)                               \
        dst[i] = src[i];                                                                \
    for (; i + (LANES) <= count; i += (LANES))                                          \
        STORE(dst + i, LOAD(src + i));                                                  \
    for (; i < count; i++)                                                              \
        dst[i] = src[i];                                                                \
    _mm_sfence();                                                                       \
}
STREAM_COPY(float, f32, 4, _mm_stream_ps, _mm_loadu_ps)
STREAM_COPY(double, f64, 2, _mm_stream_pd, _mm_loadu_pd)
#else
#define STREAM_COPY(T, SUFFIX)                                                          \
static void stream_copy_##SUFFIX(T *dst, const T *src, Py_ssize_t count)                \
{                                                                                       \
    memcpy(dst, src, count * sizeof *dst);                                              \
}
STREAM_COPY(float, f32)
STREAM_COPY(double, f64)
#endif

#define PER_IMAGE(g) (TILES_OF((g)->oh, (g)->tile) * TILES_OF((g)->ow, (g)->tile))

#define DEFINE_WINOGRAD_BLOCKS(T, SUFFIX, KIND)                                         \
/* y = the convolution of x by v ([36, C, O]), through u (a block's transformed      \
 * inputs) and m (its products), block by block; with kept (b->kept), each block's    \
 * transformed inputs are copied there too, from tile part.first_tile on. */          \
static void winograd_conv_##SUFFIX(const T *x, const T *v, T *u, T *m, T *y, T *kept,   \
                                   const PartBlocks *b)                                 \
{                                                                                       \
    const WinogradGeometry *part = &b->part;                                            \
    const Py_ssize_t per_image = PER_IMAGE(part);                                       \
    for (Py_ssize_t start = 0; start < part->n; start += b->block) {                    \
        WinogradGeometry in = *part;                                                    \
        in.n = part->n - start < b->block ? part->n - start : b->block;                 \
        in.first_tile = 0;                                                              \
        in.plane_tiles = in.n * per_image;                                              \
        winograd_input_##SUFFIX(x + start * part->h * part->w * part->c, u, &in);       \
        winograd_gemms_of(KIND, u, v, m, 0, in.n * per_image, part->c, b->o, 0);        \
        if (b->kept)                                                                    \
            stream_copy_##SUFFIX(kept + (part->first_tile + start * per_image) * 36 * part->c, \
                                 u, in.n * per_image * 36 * part->c);                   \
        const WinogradGeometry out = {.n = in.n, .oh = part->oh, .ow = part->ow,        \
                                      .c = b->o, .tile = part->tile};                   \
        T *y_block = y + start * part->oh * part->ow * b->o;                            \
        if (part->tile == 4)                                                            \
            winograd_output_t4_##SUFFIX(m, y_block, &out);                              \
        else                                                                            \
            winograd_output_t2_##SUFFIX(m, y_block, &out);                              \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* sums[36, C, O] += the filter gradient's tile products of the part's images: their   \
 * kept inputs u (from part.first_tile on) and output gradient grad [n, OH, OW, O],     \
 * whose transformed tiles go through v, block by block. */                             \
static void winograd_grad_sums_##SUFFIX(const T *grad, const T *u, T *v, T *sums,       \
                                        const PartBlocks *b)                            \
{                                                                                       \
    const WinogradGeometry *part = &b->part;                                            \
    const Py_ssize_t per_image = PER_IMAGE(part);                                       \
    for (Py_ssize_t start = 0; start < part->n; start += b->block) {                    \
        const Py_ssize_t count = part->n - start < b->block ? part->n - start : b->block; \
        const WinogradGeometry tiles = {.n = count, .oh = part->oh, .ow = part->ow,     \
                                        .c = b->o, .tile = part->tile};                 \
        const T *grad_block = grad + start * part->oh * part->ow * b->o;                \
        if (part->tile == 4)                                                            \
            winograd_grad_tiles_t4_##SUFFIX(grad_block, v, &tiles);                     \
        else                                                                            \
            winograd_grad_tiles_t2_##SUFFIX(grad_block, v, &tiles);                     \
        winograd_gemms_of(KIND, u, v, sums, part->first_tile + start * per_image,       \
                          count * per_image, part->c, b->o, 1);                         \
    }                                                                                   \
}

DEFINE_WINOGRAD_BLOCKS(float, f32, 'f')
DEFINE_WINOGRAD_BLOCKS(double, f64, 'd')

/* Reads (n, h, w, c, top, left, oh, ow, first_tile, plane_tiles, tile, o, block, kept)
 * and checks it: with kept tiles (winograd_conv's kept array, winograd_grad_sums's u)
 * the part's tiles within their plane_tiles, else first_tile 0 and a block's tiles
 * within plane_tiles; o a whole number of the GEMMs' vectors. */
static int read_part_blocks(PyObject *shape, PartBlocks *b, char kind)
{
    WinogradGeometry *g = &b->part;
    if (!PyArg_ParseTuple(shape, "nnnnnnnnnnnnnp", &g->n, &g->h, &g->w, &g->c, &g->top,
                          &g->left, &g->oh, &g->ow, &g->first_tile, &g->plane_tiles,
                          &g->tile, &b->o, &b->block, &b->kept))
        return -1;
    Py_ssize_t tiles = 0, block_tiles = 0;
    const int lanes = kind == 'f' ? 16 : 8;
    if (g->n < 0 || g->h < 0 || g->w < 0 || g->c < 0 || g->top < 0 || g->left < 0
        || g->oh < 0 || g->ow < 0 || g->first_tile < 0 || g->plane_tiles < 0
        || !WINOGRAD_TILE(g->tile) || b->o < 0 || b->o % lanes || b->block < 1
        || product_of(SIZES(g->n, TILES_OF(g->oh, g->tile), TILES_OF(g->ow, g->tile)),
                      "tiles", &tiles) < 0
        || product_of(SIZES(b->block < g->n ? b->block : g->n, PER_IMAGE(g)), "tiles",
                      &block_tiles) < 0
        || (b->kept ? g->first_tile > g->plane_tiles - tiles
                    : g->first_tile != 0 || block_tiles > g->plane_tiles)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "geometry (n, h, w, c, top, left, oh, ow, first_tile, plane_tiles, "
                     "tile, o, block, kept): sizes must be >= 0, the tile 4 or 2, o a "
                     "multiple of %d, block >= 1 and the tiles within plane_tiles", lanes);
        return -1;
    }
    return 0;
}

typedef struct {
    Task task;
    char kind;
    void *x, *v, *u, *m, *y, *kept;
    PartBlocks b;
} WinogradConvCall;

static void run_winograd_conv(Task *task)
{
    WinogradConvCall *c = (WinogradConvCall *)task;
    BY_KIND(c->kind, winograd_conv, c->x, c->v, c->u, c->m, c->y, c->kept, &c->b);
}

/* winograd_conv(geometry, x, v, u, m, y, kept): see winograd_conv_f32 and
 * read_part_blocks (plane_tiles: the kept array's; a block's without it); u and m
 * hold a block's transformed inputs and products; kept None unless kept. Records
 * under run_parts. */
PyObject *py_winograd_conv(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *v_obj, *u_obj, *m_obj, *y_obj, *kept_obj;
    if (!PyArg_ParseTuple(args, "O!OOOOOO:winograd_conv", &PyTuple_Type, &shape, &x_obj,
                          &v_obj, &u_obj, &m_obj, &y_obj, &kept_obj))
        return NULL;
    char kind = float_kind(x_obj, "x");
    PartBlocks b;
    if (!kind || need_gemm_path("winograd_conv") < 0 || read_part_blocks(shape, &b, kind) < 0)
        return NULL;
    const WinogradGeometry *g = &b.part;
    const Py_ssize_t block_tiles = (b.block < g->n ? b.block : g->n) * PER_IMAGE(g);
    if (b.kept == (kept_obj == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "winograd_conv: kept tiles need the kept array, "
                        "and no kept array without them");
        return NULL;
    }
    WinogradConvCall *call = new_task(sizeof *call, run_winograd_conv);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, x_obj, 0, kind, SIZES(g->n, g->h, g->w, g->c), "x", &call->x) < 0
        || take(views, v_obj, 0, kind, SIZES(36, g->c, b.o), "v", &call->v) < 0
        || take(views, u_obj, 1, kind, SIZES(block_tiles, 36, g->c), "u", &call->u) < 0
        || take(views, m_obj, 1, kind, SIZES(block_tiles, 36, b.o), "m", &call->m) < 0
        || take(views, y_obj, 1, kind, SIZES(g->n, g->oh, g->ow, b.o), "y", &call->y) < 0
        || take_optional(views, kept_obj, 1, kind, SIZES(g->plane_tiles, 36, g->c), "kept",
                &call->kept) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->b = b;
    return submit(&call->task);
}

typedef struct {
    Task task;
    char kind;
    void *grad, *u, *v, *sums;
    PartBlocks b;
} WinogradGradSumsCall;

static void run_winograd_grad_sums(Task *task)
{
    WinogradGradSumsCall *c = (WinogradGradSumsCall *)task;
    BY_KIND(c->kind, winograd_grad_sums, c->grad, c->u, c->v, c->sums, &c->b);
}

/* winograd_grad_sums(geometry, grad, u, v, sums): see winograd_grad_sums_f32 and
 * read_part_blocks (h, w, top and left unused; kept true); v holds a block's
 * gradient tiles. Records under run_parts. */
PyObject *py_winograd_grad_sums(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *grad_obj, *u_obj, *v_obj, *sums_obj;
    if (!PyArg_ParseTuple(args, "O!OOOO:winograd_grad_sums", &PyTuple_Type, &shape,
                          &grad_obj, &u_obj, &v_obj, &sums_obj))
        return NULL;
    char kind = float_kind(grad_obj, "grad");
    PartBlocks b;
    if (!kind || need_gemm_path("winograd_grad_sums") < 0
        || read_part_blocks(shape, &b, kind) < 0)
        return NULL;
    const WinogradGeometry *g = &b.part;
    if (!b.kept) {
        PyErr_SetString(PyExc_ValueError, "winograd_grad_sums: the kept tiles expected");
        return NULL;
    }
    const Py_ssize_t block_tiles = (b.block < g->n ? b.block : g->n) * PER_IMAGE(g);
    WinogradGradSumsCall *call = new_task(sizeof *call, run_winograd_grad_sums);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, grad_obj, 0, kind, SIZES(g->n, g->oh, g->ow, b.o), "grad",
             &call->grad) < 0
        || take(views, u_obj, 0, kind, SIZES(g->plane_tiles, 36, g->c), "u", &call->u) < 0
        || take(views, v_obj, 1, kind, SIZES(block_tiles, 36, b.o), "v", &call->v) < 0
        || take(views, sums_obj, 1, kind, SIZES(36, g->c, b.o), "sums", &call->sums) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->b = b;
    return submit(&call->task);
}

/* -- the filter transforms ------------------------------------------------------------ */

/* out[a][b][e] = sum_p sum_q mat[a][p] mat[b][q] grid[p][q][e] (a, b < rows; p, q <
 * size; e < elements, the filter's C * O channel pairs): V = G g G^T of a K x K
 * filter (mat G, [6, K]) or dW = G^T M G of the summed [6, 6] tile products (mat
 * G^T, [K, 6]), along p first, then q. Summed in double and rounded once into out,
 * without FMA (fp-contract off), so every clone gives the same bits; eight
 * pairs at a time, in vectors of double. NumPy's way, a
 * Kronecker-product GEMM in float64 with the casts around it, took 0.3 ms for a
 * 128 x 128 filter, on one core, three times per layer and step. */
#define MAX_POINTS 6
#define FILTER_BLOCK 64     /* pairs per block (a multiple of FILTER_LANES) */

/* A [rows, size] matrix applied to pairs first..stop-1 of `elements`, of the sum of
 * `stack` grids (the filter gradient's thread parts' tile products). */
typedef struct {
    Py_ssize_t rows, size, elements, first, stop, stack;
} FilterRange;
#define FILTER_LANES 8      /* pairs per step: a double_lanes */


#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

/* Whether mat is F(4x4, 3x3)'s G ([6, 3], winograd.py's _filter_transform(3)) or,
 * transposed, its G^T ([3, 6]): what g_rows and g_columns compute. */
static int is_f43_g(const double *mat, int transposed)
{
    static const double g[6][3] = {{1.0 / 4, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
    for (int a = 0; a < 6; a++)
        for (int p = 0; p < 3; p++)
            if (mat[transposed ? p * 6 + a : a * 3 + p] != g[a][p])
                return 0;
    return 1;
}

#define DEFINE_WINOGRAD_FILTER(T, SUFFIX)                                               \
/* F(4x4, 3x3)'s two matrices written out (G [6, 3] and G^T [3, 6], the rows of      \
 * _filter_transform's points 0, 1, -1, 2, -2 and infinity), shared sums taken once:  \
 * 162 and 207 operations a pair where the general product takes 324. In double like \
 * it, the sums grouped otherwise (within a few double ulps of it). Measured in the   \
 * cifar10 step at batch 64: its 18 filter transforms 1.45 -> 1.24 ms.                \
 * g_rows: the 6 values G x of a 3-vector x. */                                        \
static inline __attribute__((always_inline)) void                                       \
g_rows_##SUFFIX(const double_lanes *x, double_lanes *r)                                 \
{                                                                                       \
    const double_lanes sum02 = x[0] + x[2], outer = x[0] * (1.0 / 24) + x[2] * (1.0 / 6); \
    const double_lanes middle = x[1] * (1.0 / 12);                                      \
    /* the taps a row leaves out are added times 0, as the general product does: a  \
     * NaN or infinity anywhere in the filter reaches every term */                  \
    r[0] = x[0] * 0.25 + (x[1] + x[2]) * 0.0;                                           \
    r[1] = (sum02 + x[1]) * (-1.0 / 6);                                                 \
    r[2] = (sum02 - x[1]) * (-1.0 / 6);                                                 \
    r[3] = outer + middle;                                                              \
    r[4] = outer - middle;                                                              \
    r[5] = x[2] + (x[0] + x[1]) * 0.0;                                                  \
}                                                                                       \
                                                                                        \
/* The 3 values G^T y of a 6-vector y. */                                               \
static inline __attribute__((always_inline)) void                                       \
g_columns_##SUFFIX(const double_lanes *y, double_lanes *z)                              \
{                                                                                       \
    const double_lanes ones = y[1] + y[2], signs = y[1] - y[2];                         \
    const double_lanes twos = y[3] + y[4], signed_twos = y[3] - y[4];                   \
    z[0] = y[0] * 0.25 + ones * (-1.0 / 6) + twos * (1.0 / 24) + y[5] * 0.0;            \
    z[1] = signs * (-1.0 / 6) + signed_twos * (1.0 / 12) + (y[0] + y[5]) * 0.0;         \
    z[2] = ones * (-1.0 / 6) + twos * (1.0 / 6) + y[5] + y[0] * 0.0;                    \
}                                                                                       \
                                                                                        \
/* y[a] = sum_p mat[a][p] x[p], a < rows, p < size: by the matrix, or where           \
 * `written_out` (mat is F(4x4, 3x3)'s G or G^T, see is_f43_g) by g_rows / g_columns. */ \
static inline __attribute__((always_inline)) void                                       \
apply_matrix_##SUFFIX(const double *mat, Py_ssize_t rows, Py_ssize_t size,              \
                      int written_out, const double_lanes *x, double_lanes *y)          \
{                                                                                       \
    if (written_out && size == 3)                                                       \
        g_rows_##SUFFIX(x, y);                                                          \
    else if (written_out)                                                               \
        g_columns_##SUFFIX(x, y);                                                       \
    else                                                                                \
        for (Py_ssize_t a = 0; a < rows; a++) {                                         \
            double_lanes sum = {0};                                                     \
            for (Py_ssize_t p = 0; p < size; p++)                                       \
                sum += mat[a * size + p] * x[p];                                        \
            y[a] = sum;                                                                 \
        }                                                                               \
}                                                                                       \
                                                                                        \
/* One step of winograd_filter on a block copied to local rows (`stride` apart):        \
 * FILTER_LANES pairs from e on, through vectors of double: the matrix along p (each \
 * column of the grid), then along q (each row of that). */                            \
static inline __attribute__((always_inline)) void                                       \
filter_step_##SUFFIX(const double *mat, const T *grid, T *out, Py_ssize_t rows,         \
                     Py_ssize_t size, Py_ssize_t stride, Py_ssize_t e, int written_out) \
{                                                                                       \
    double_lanes column[MAX_POINTS], half[MAX_POINTS][MAX_POINTS], result[MAX_POINTS];  \
    for (Py_ssize_t q = 0; q < size; q++) {     /* half[a][q] = sum_p mat[a][p] g[p][q] */ \
        for (Py_ssize_t p = 0; p < size; p++) {                                         \
            T##_lanes v;                                                                \
            memcpy(&v, grid + (p * size + q) * stride + e, sizeof v);                   \
            column[p] = __builtin_convertvector(v, double_lanes);                       \
        }                                                                               \
        apply_matrix_##SUFFIX(mat, rows, size, written_out, column, result);            \
        for (Py_ssize_t a = 0; a < rows; a++)                                           \
            half[a][q] = result[a];                                                     \
    }                                                                                   \
    for (Py_ssize_t a = 0; a < rows; a++) {                                             \
        apply_matrix_##SUFFIX(mat, rows, size, written_out, half[a], result);           \
        for (Py_ssize_t b = 0; b < rows; b++) {                                         \
            const T##_lanes rounded = __builtin_convertvector(result[b], T##_lanes);    \
            memcpy(out + (a * rows + b) * stride + e, &rounded, sizeof rounded);        \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* Pairs first..stop-1, in blocks of FILTER_BLOCK through local rows: the grid's and \
 * out's rows are C * O (`elements`) items apart (64 KiB for 128 x 128 float32), so   \
 * reading or writing all 36 in step fell into one L1 set. A last, shorter block is   \
 * padded with zeros to whole vectors (their results are not copied out). The         \
 * `stack` grids (each size * size * elements items) are added into the local rows    \
 * first, in T and in order, as NumPy's total += grid would. */                       \
static inline __attribute__((always_inline)) void                                       \
filter_blocks_##SUFFIX(const double *mat, const T *grid, T *out, Py_ssize_t rows,       \
                       Py_ssize_t size, Py_ssize_t elements, Py_ssize_t first,          \
                       Py_ssize_t stop, Py_ssize_t stack, int written_out)              \
{                                                                                       \
    T local_in[MAX_POINTS * MAX_POINTS * FILTER_BLOCK];                                 \
    T local_out[MAX_POINTS * MAX_POINTS * FILTER_BLOCK];                                \
    for (Py_ssize_t e0 = first; e0 < stop; e0 += FILTER_BLOCK) {                        \
        const Py_ssize_t eb = stop - e0 < FILTER_BLOCK ? stop - e0 : FILTER_BLOCK;      \
        const int whole = eb == FILTER_BLOCK;      /* constant-size copies, inlined */ \
        for (Py_ssize_t row = 0; row < size * size; row++) {                            \
            T *local = local_in + row * FILTER_BLOCK;                                   \
            if (whole)                                                                  \
                memcpy(local, grid + row * elements + e0, FILTER_BLOCK * sizeof(T));    \
            else {                                                                      \
                memset(local, 0, FILTER_BLOCK * sizeof(T));                             \
                memcpy(local, grid + row * elements + e0, eb * sizeof(T));              \
            }                                                                           \
            for (Py_ssize_t part = 1; part < stack; part++) {                           \
                const T *more = grid + (part * size * size + row) * elements + e0;      \
                for (Py_ssize_t e = 0; e < eb; e++)                                     \
                    local[e] += more[e];                                                \
            }                                                                           \
        }                                                                               \
        for (Py_ssize_t e = 0; e < eb; e += FILTER_LANES)                               \
            filter_step_##SUFFIX(mat, local_in, local_out, rows, size, FILTER_BLOCK, e, \
                                 written_out);                                          \
        for (Py_ssize_t row = 0; row < rows * rows; row++) {                            \
            T *target = out + row * elements + e0;                                      \
            if (whole)                                                                  \
                memcpy(target, local_out + row * FILTER_BLOCK, FILTER_BLOCK * sizeof(T)); \
            else                                                                        \
                memcpy(target, local_out + row * FILTER_BLOCK, eb * sizeof(T));         \
        }                                                                               \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* The four shapes Winograd uses, with constant sizes (GCC then unrolls the sums    \
 * and keeps them in registers: 3x faster), and any other. */                         \
CPU_CLONES static void winograd_filter_##SUFFIX(const double *mat, const T *grid,       \
                                                T *out, const FilterRange *r)           \
{                                                                                       \
    const Py_ssize_t n = r->elements, first = r->first, stop = r->stop, k = r->stack;   \
    if (r->rows == 6 && r->size == 3 && is_f43_g(mat, 0))                               \
        filter_blocks_##SUFFIX(mat, grid, out, 6, 3, n, first, stop, k, 1);             \
    else if (r->rows == 3 && r->size == 6 && is_f43_g(mat, 1))                          \
        filter_blocks_##SUFFIX(mat, grid, out, 3, 6, n, first, stop, k, 1);             \
    else if (r->rows == 6 && r->size == 3)                                              \
        filter_blocks_##SUFFIX(mat, grid, out, 6, 3, n, first, stop, k, 0);             \
    else if (r->rows == 3 && r->size == 6)                                              \
        filter_blocks_##SUFFIX(mat, grid, out, 3, 6, n, first, stop, k, 0);             \
    else if (r->rows == 6 && r->size == 5)                                              \
        filter_blocks_##SUFFIX(mat, grid, out, 6, 5, n, first, stop, k, 0);             \
    else if (r->rows == 5 && r->size == 6)                                              \
        filter_blocks_##SUFFIX(mat, grid, out, 5, 6, n, first, stop, k, 0);             \
    else                                                                                \
        filter_blocks_##SUFFIX(mat, grid, out, r->rows, r->size, n, first, stop, k, 0); \
}

DEFINE_WINOGRAD_FILTER(float, f32)
DEFINE_WINOGRAD_FILTER(double, f64)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

typedef struct {
    Task task;
    char kind;
    void *mat, *grid, *out;
    FilterRange r;
} WinogradFilterCall;

static void run_winograd_filter(Task *task)
{
    WinogradFilterCall *c = (WinogradFilterCall *)task;
    BY_KIND(c->kind, winograd_filter, c->mat, c->grid, c->out, &c->r);
}

/* winograd_filter((rows, size, elements, first, stop, stack), mat, grid, out): see
 * winograd_filter_f32; mat float64 [rows, size], grid [stack, size, size, elements]
 * (summed over stack), out [rows, rows, elements], of which pairs first..stop-1 are
 * written. Records under run_parts. */
PyObject *py_winograd_filter(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *mat_obj, *grid_obj, *out_obj;
    FilterRange r;
    if (!PyArg_ParseTuple(args, "O!OOO:winograd_filter", &PyTuple_Type, &shape, &mat_obj,
                          &grid_obj, &out_obj)
        || !PyArg_ParseTuple(shape, "nnnnnn", &r.rows, &r.size, &r.elements, &r.first,
                             &r.stop, &r.stack))
        return NULL;
    if (r.rows < 1 || r.rows > MAX_POINTS || r.size < 1 || r.size > MAX_POINTS
        || r.elements < 0 || r.first < 0 || r.first > r.stop || r.stop > r.elements
        || r.stack < 1) {
        PyErr_Format(PyExc_ValueError, "winograd_filter: a [rows, size] matrix of 1 to %d "
                     "rows and columns, elements >= 0, 0 <= first <= stop <= elements and "
                     "stack >= 1 expected, got (%zd, %zd, %zd, %zd, %zd, %zd)", MAX_POINTS,
                     r.rows, r.size, r.elements, r.first, r.stop, r.stack);
        return NULL;
    }
    char kind = float_kind(grid_obj, "grid");
    if (!kind)
        return NULL;
    WinogradFilterCall *call = new_task(sizeof *call, run_winograd_filter);
    if (!call)
        return NULL;
    Views *views = &call->task.views;
    if (take(views, mat_obj, 0, 'd', SIZES(r.rows, r.size), "mat", &call->mat) < 0
        || take(views, grid_obj, 0, kind, SIZES(r.stack, r.size, r.size, r.elements), "grid",
                &call->grid) < 0
        || take(views, out_obj, 1, kind, SIZES(r.rows, r.rows, r.elements), "out",
                &call->out) < 0) {
        discard(&call->task);
        return NULL;
    }
    call->kind = kind;
    call->r = r;
    return submit(&call->task);
}

PyObject *py_winograd_input(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *x_obj, *u_obj;
    WinogradGeometry g = {.tile = 4};
    if (!PyArg_ParseTuple(args, "O!OO:winograd_input", &PyTuple_Type, &shape, &x_obj, &u_obj)
        || !PyArg_ParseTuple(shape, "nnnnnnnnnn|n", &g.n, &g.h, &g.w, &g.c, &g.top, &g.left,
                             &g.oh, &g.ow, &g.first_tile, &g.plane_tiles, &g.tile))
        return NULL;
    Py_ssize_t tiles = 0;
    if (g.n < 0 || g.h < 0 || g.w < 0 || g.c < 0 || g.top < 0 || g.left < 0 || g.oh < 0
        || g.ow < 0 || g.first_tile < 0 || g.plane_tiles < 0 || !WINOGRAD_TILE(g.tile)
        || product_of(SIZES(g.n, TILES_OF(g.oh, g.tile), TILES_OF(g.ow, g.tile)), "tiles",
                      &tiles) < 0
        || g.first_tile > g.plane_tiles - tiles) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "geometry (n, h, w, c, top, left, oh, ow, first_tile, plane_tiles[, "
                        "tile]): sizes must be >= 0, the images' tiles within a plane and "
                        "the tile 4 (F(4x4, 3x3)) or 2 (F(2x2, 5x5))");
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
    RUN_WITHOUT_GIL(kind, winograd_input, x, u, &g);
    release_all(&views);
    Py_RETURN_NONE;
}

/* Between the tiles (4x4 or 2x2) of an [N, OH, OW, O] array y and their
 * transformed [tiles, 36, O] m: A^T m A into y (to_tiles 0), A y A^T into m (1). */
static PyObject *convert_output_tiles(PyObject *args, int to_tiles)
{
    PyObject *shape, *m_obj, *y_obj;
    WinogradGeometry g = {.tile = 4};
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &shape, &m_obj, &y_obj)
        || !PyArg_ParseTuple(shape, "nnnn|n", &g.n, &g.oh, &g.ow, &g.c, &g.tile))
        return NULL;
    if (g.n < 0 || g.oh < 0 || g.ow < 0 || g.c < 0 || !WINOGRAD_TILE(g.tile)) {
        PyErr_SetString(PyExc_ValueError, "geometry (n, oh, ow, o[, tile]): sizes must be "
                        ">= 0 and the tile 4 (F(4x4, 3x3)) or 2 (F(2x2, 5x5))");
        return NULL;
    }
    char kind = float_kind(y_obj, "y");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *m, *y;
    if (take(&views, m_obj, to_tiles, kind,
             SIZES(g.n, TILES_OF(g.oh, g.tile), TILES_OF(g.ow, g.tile), 36, g.c), "m", &m) < 0
        || take(&views, y_obj, !to_tiles, kind, SIZES(g.n, g.oh, g.ow, g.c), "y", &y) < 0) {
        release_all(&views);
        return NULL;
    }
    if (to_tiles && g.tile == 2)
        RUN_WITHOUT_GIL(kind, winograd_grad_tiles_t2, y, m, &g);
    else if (to_tiles)
        RUN_WITHOUT_GIL(kind, winograd_grad_tiles_t4, y, m, &g);
    else if (g.tile == 2)
        RUN_WITHOUT_GIL(kind, winograd_output_t2, m, y, &g);
    else
        RUN_WITHOUT_GIL(kind, winograd_output_t4, m, y, &g);
    release_all(&views);
    Py_RETURN_NONE;
}

PyObject *py_winograd_output(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_output_tiles(args, 0);
}

PyObject *py_winograd_grad_tiles(PyObject *self, PyObject *args)
{
    (void)self;
    return convert_output_tiles(args, 1);
}
