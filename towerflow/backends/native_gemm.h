/* What native_gemm.c (the entry points, the choice of vector path) shares with the
 * kernels of each path (native_gemm_avx512.c, native_gemm_avx2.c: native_gemm_tiles.h
 * compiled for that path's instructions).
 *
 * Each path is its own translation unit, compiled once for its instructions: the
 * kernels were one file under GCC's target_clones (AVX-512, AVX2 and plain x86-64
 * clones of code written for 64-byte vectors), which cost gcc 12 115 CPU seconds here
 * and 357 on an AMD EPYC, almost all of it lowering 64-byte vectors into pieces for
 * the clones that then never ran; now 2.3 s (AVX-512) and 1.6 s (AVX2) here. */
#ifndef TOWERFLOW_NATIVE_GEMM_H
#define TOWERFLOW_NATIVE_GEMM_H

#include "native_common.h"

/* c[i, j] for i in [first_row, first_row + rows), j in [first_column, first_column
 * + columns) of c[m, n] = op(a) @ op(b), op(a) [m, k], op(b) [k, n], where a is
 * stored [k, m] when transpose_a and b [n, k] when transpose_b (see native.gemm). */
typedef struct {
    Py_ssize_t m, k, n;
    int transpose_a, transpose_b;
    Py_ssize_t first_row, rows, first_column, columns;
} GemmGeometry;

/* One vector path's kernels (see native_gemm_tiles.h's entry points). */
typedef struct {
    const char *name;
    int (*gemm_f32)(const GemmGeometry *g, const void *a, const void *b, void *c);
    int (*gemm_f64)(const GemmGeometry *g, const void *a, const void *b, void *c);
    void (*winograd_gemms_f32)(const void *u, const void *w, void *m, Py_ssize_t first,
                               Py_ssize_t tiles, Py_ssize_t c, Py_ssize_t o, int sums);
    void (*winograd_gemms_f64)(const void *u, const void *w, void *m, Py_ssize_t first,
                               Py_ssize_t tiles, Py_ssize_t c, Py_ssize_t o, int sums);
} GemmKernels;

NATIVE_HIDDEN extern const GemmKernels gemm_kernels_avx512, gemm_kernels_avx2;

/* This thread's packing buffer of at least `bytes` (64-byte aligned); NULL if none. */
NATIVE_HIDDEN void *gemm_packing_buffer(size_t bytes);

/* Rows of the blocked kernel's register tile (its packed a panels). */
#define GEMM_ROWS 6

/* BLOCK_K: one b panel (BLOCK_K x 32 float32 = 32 KiB on AVX-512) stays in a 48 KiB
 * L1 while it meets every a panel. BLOCK_M: the packed a block (BLOCK_M x BLOCK_K
 * float32, 144 KiB) stays in the 1 MiB L2. BLOCK_N: the packed b block (1 MiB float32)
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

/* The unpacked kernel beats the blocked one (by 1.2-1.8x, see
 * benchmarks/dense_gemm.py) on the convolutions' narrow products: up to 256 bytes of
 * columns (64 float32: 4 AVX-512 vectors) and b small enough to stay in half the 1 MiB
 * L2 (its rows are read once per tile of a's rows): there packing a costs more than it
 * saves. With a 1 MiB b (a 320 x 4096^T @ 4096 x 64 filter gradient) the blocked
 * kernel won, 178 to 143 GFLOP/s. A deeper a^T @ b (a filter gradient over a whole
 * batch of rows) of up to 128 bytes of columns runs unpacked in chunks of b's rows that
 * fit, adding each chunk's products into c: 27 x 32768^T @ 32768 x 32 (the cifar10
 * stem's, one thread) 125 -> 190 GFLOP/s, 288 x 8192 x 32 167 -> 191; with 256 bytes of
 * columns the blocked kernel still won (320 x 4096 x 64: 186 to 167). (Measured on
 * AVX-512.) */
#ifndef UNPACKED_MAX_BYTES
#define UNPACKED_MAX_BYTES 256
#endif
#define UNPACKED_DEEP_BYTES 128
#define UNPACKED_MAX_B_BYTES (1 << 19)

#endif
