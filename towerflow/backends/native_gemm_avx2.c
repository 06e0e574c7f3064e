/* The GEMM kernels for AVX2 with FMA (native_gemm_tiles.h; see native_gemm.h): 32-byte
 * vectors, and with 16 vector registers the unpacked kernel's tiles of 4 or 6 rows (6 x
 * 2 accumulators, two b vectors and the broadcast a value: 15 registers). */
#include "native_gemm.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("avx2,fma")
#define ISA avx2
#define VECTOR_BYTES 32
#define WIDE_GEMM_ROWS 6
#define SHORT_GEMM_ROWS 4
#include "native_gemm_path.h"
#else
const GemmKernels gemm_kernels_avx2 = {NULL, NULL, NULL, NULL, NULL};
#endif
