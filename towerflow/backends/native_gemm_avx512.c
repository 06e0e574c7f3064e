/* The GEMM kernels for AVX-512 (native_gemm_tiles.h; see native_gemm.h): 64-byte
 * vectors, and with 32 vector registers the unpacked kernel's tiles of 8 or 10 rows. */
#include "native_gemm.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("avx512f,avx2,fma")
#define ISA avx512
#define VECTOR_BYTES 64
#define WIDE_GEMM_ROWS 10
#define SHORT_GEMM_ROWS 8
#include "native_gemm_path.h"
#else
const GemmKernels gemm_kernels_avx512 = {NULL, NULL, NULL, NULL, NULL};
#endif
