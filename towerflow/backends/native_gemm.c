/* The register-blocked GEMM, Winograd's 36 GEMMs on it, and their entry points. */
#include "native_common.h"

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
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        winograd_gemms_f32(u, w, m, first, tiles, c, o, sums);
    else
        winograd_gemms_f64(u, w, m, first, tiles, c, o, sums);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}

/* gemm((m, k, n, transposed), a, b, c): c[m, n] = a @ b (a [m, k]), or with
 * transposed a^T @ b (a [k, m]); see gemm_f32. */
PyObject *py_gemm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *shape, *a_obj, *b_obj, *c_obj;
    Py_ssize_t m, k, n;
    int transposed;
    if (!PyArg_ParseTuple(args, "O!OOO:gemm", &PyTuple_Type, &shape, &a_obj, &b_obj, &c_obj)
        || !PyArg_ParseTuple(shape, "nnnp", &m, &k, &n, &transposed))
        return NULL;
    if (m < 0 || k < 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "geometry (m, k, n, transposed): sizes must be >= 0");
        return NULL;
    }
    char kind = float_kind(a_obj, "a");
    if (!kind)
        return NULL;
    Views views = {.held = 0};
    void *a, *b, *c;
    if (take(&views, a_obj, 0, kind, SIZES(m, k), "a", &a) < 0
        || take(&views, b_obj, 0, kind, SIZES(k, n), "b", &b) < 0
        || take(&views, c_obj, 1, kind, SIZES(m, n), "c", &c) < 0) {
        release_all(&views);
        return NULL;
    }
    if (n % (kind == 'f' ? 16 : 8)) {
        release_all(&views);
        PyErr_Format(PyExc_ValueError, "gemm: %zd columns, not a multiple of the vector's "
                     "%d items", n, kind == 'f' ? 16 : 8);
        return NULL;
    }
    const Py_ssize_t a_row = transposed ? 1 : k, a_col = transposed ? m : 1;
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'f')
        gemm_f32(a, a_row, a_col, b, n, c, n, m, k, n, 0);
    else
        gemm_f64(a, a_row, a_col, b, n, c, n, m, k, n, 0);
    Py_END_ALLOW_THREADS
    release_all(&views);
    Py_RETURN_NONE;
}
