/* One vector path's GEMM kernels, both dtypes, and its table (gemm_kernels_ISA):
 * the body of native_gemm_avx512.c and native_gemm_avx2.c, which define ISA,
 * VECTOR_BYTES, WIDE_GEMM_ROWS and SHORT_GEMM_ROWS (see native_gemm_tiles.h) and
 * select the path's instructions first. */

#define T float
#define SUFFIX f32
#define INDEX int32_t
#include "native_gemm_tiles.h"
#undef T
#undef SUFFIX
#undef INDEX

#define T double
#define SUFFIX f64
#define INDEX int64_t
#include "native_gemm_tiles.h"
#undef T
#undef SUFFIX
#undef INDEX

#define PATH_NAME_(isa) #isa
#define PATH_NAME(isa) PATH_NAME_(isa)
#define PATH_TABLE_(isa) gemm_kernels_##isa
#define PATH_TABLE(isa) PATH_TABLE_(isa)
#define PATH_KERNEL_(name, isa, suffix) name##_##isa##_##suffix
#define PATH_KERNEL(name, isa, suffix) PATH_KERNEL_(name, isa, suffix)

const GemmKernels PATH_TABLE(ISA) = {
    PATH_NAME(ISA), PATH_KERNEL(run_gemm, ISA, f32), PATH_KERNEL(run_gemm, ISA, f64),
    PATH_KERNEL(winograd_gemms, ISA, f32), PATH_KERNEL(winograd_gemms, ISA, f64)};
