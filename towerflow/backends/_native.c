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
 * else to NumPy. The batch norm, Winograd, GEMM and optimizer-update kernels
 * described in their files' comments run the same way.
 *
 * The module's C files, built into this one extension (setup.py):
 *   native_common.h      what they share: includes, macros, argument helpers
 *   _native.c            this overview, the argument helpers, the method table
 *   native_window.c      bias + max pool, its gradient, im2col, col2im
 *   native_winograd.c    Winograd's transforms, F(4x4, 3x3) and F(2x2, 5x5)
 *   native_gemm.c        the GEMMs' entry points and the choice of vector path
 *   native_gemm_avx512.c, native_gemm_avx2.c
 *                        the register-blocked GEMM and Winograd's 36 GEMMs
 *                        (native_gemm_tiles.h) for each vector path
 *   native_batch_norm.c  training-mode batch norm, fused with a max pool or its gradient
 *   native_updates.c     the optimizer updates
 *   native_parts.c       run_parts: a kernel's parts on C threads, without the GIL
 *
 * Arrays arrive as C-contiguous buffers (the buffer protocol: no NumPy
 * headers are needed to build this); native.py checks shapes and dtypes,
 * and each function here checks every buffer's size again before writing.
 */
#include "native_common.h"

/* -- argument handling ---------------------------------------------------------- */

/* 'f' (float32), 'd' (float64) or 'B' (uint8) for a buffer's format, else 0. */
char kind_of(const Py_buffer *view)
{
    const char *format = view->format ? view->format : "B";
    if (*format == '@' || *format == '=' || *format == '<')
        format++;
    if (format[0] && !format[1] && (format[0] == 'f' || format[0] == 'd' || format[0] == 'B'))
        return format[0];
    return 0;
}

void release_all(Views *views)
{
    for (int i = 0; i < views->held; i++)
        PyBuffer_Release(&views->views[i]);
    views->held = 0;
}

/* The product of `count` sizes into *product; -1 with a ValueError naming `name`
 * when a size is negative or the product does not fit a Py_ssize_t (a wrapped
 * product could match a small buffer and let a kernel read past it). */
int product_of(const Py_ssize_t *sizes, int count, const char *name, Py_ssize_t *product)
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

/* A C-contiguous view of obj (with its format), held in views until release_all;
 * NULL with the buffer protocol's error set: a TypeError (not a buffer), a
 * BufferError (not C-contiguous) or NumPy's ValueError (read-only, writable asked). */
Py_buffer *hold_view(Views *views, PyObject *obj, int writable)
{
    Py_buffer *view = &views->views[views->held];
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return NULL;
    views->held++;
    return view;
}

/* A C-contiguous view of obj holding prod(sizes) items of `kind`; None is refused
 * with a TypeError naming the argument (its kernel would read through NULL). */
int take(Views *views, PyObject *obj, int writable, char kind,
         const Py_ssize_t *sizes, int count, const char *name, void **data)
{
    *data = NULL;
    if (obj == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: expected a buffer, got None", name);
        return -1;
    }
    return take_optional(views, obj, writable, kind, sizes, count, name, data);
}

/* take, but None gives *data NULL: for the arguments a kernel may go without. */
int take_optional(Views *views, PyObject *obj, int writable, char kind,
                  const Py_ssize_t *sizes, int count, const char *name, void **data)
{
    *data = NULL;
    if (obj == Py_None)
        return 0;
    Py_ssize_t elements;
    if (product_of(sizes, count, name, &elements) < 0)
        return -1;
    const Py_buffer *view = hold_view(views, obj, writable);
    if (!view)
        return -1;
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
char float_kind(PyObject *obj, const char *name)
{
    if (obj == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: expected a float32 or float64 buffer, got None",
                     name);
        return 0;
    }
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

int read_geometry(PyObject *shape, Geometry *g)
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
static PyMethodDef methods[] = {
    /* training-mode batch norm */
    {"batch_norm_sums", py_batch_norm_sums, METH_VARARGS,
     "batch_norm_sums(geometry, x, shift, grad, relu_output, partials[, pool]): per block "
     "of rows, float64 sums of x - shift and its square (grad None), or of g and g * (x - "
     "shift) (g = grad, masked by relu_output > 0 unless None) into partials[blocks, 2, C]; "
     "with pool = (pool_geometry, code, pooled), g is the gradient max_pool_grad would "
     "route from grad (MaxPool's) and pooled, made a block at a time, never written."},
    {"batch_norm_apply", py_batch_norm_apply, METH_VARARGS,
     "batch_norm_apply(geometry, x, coefficients, y, relu): y = (x - mean) * gain + offset "
     "(coefficients [3, C]), ReLU after if relu, for rows [first, stop)."},
    {"batch_norm_pool", py_batch_norm_pool, METH_VARARGS,
     "batch_norm_pool(geometry, x, coefficients, out, code): max pooling (windows that "
     "tile x, at most 8 taps) of relu((x - mean) * gain + offset) into out, winner bits "
     "into code."},
    {"batch_norm_grad_apply", py_batch_norm_grad_apply, METH_VARARGS,
     "batch_norm_grad_apply(geometry, grad, relu_output, x, coefficients, dx[, pool]): dx = "
     "(g * gain + (x - mean) * k_centered) - k_mean (coefficients [4, C]) for rows "
     "[first, stop); g masked by relu_output > 0 unless None, or routed as pool says "
     "(see batch_norm_sums)."},
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
     "of each 4x4- (or 2x2-) output tile's 6x6 window of the NHWC x (Winograd F(4x4, 3x3) "
     "or F(2x2, 5x5); zeros outside x)."},
    {"winograd_output", py_winograd_output, METH_VARARGS,
     "winograd_output(geometry, m, y): y[N, OH, OW, O] = A^T m A of each tile of "
     "m[tiles, 36, O], cropped to the output."},
    {"winograd_grad_tiles", py_winograd_grad_tiles, METH_VARARGS,
     "winograd_grad_tiles(geometry, v, grad): v[tiles, 36, O] = A e A^T of each tile e "
     "of the NHWC output gradient (zeros past its edge), for the filter gradient."},
    {"winograd_conv", py_winograd_conv, METH_VARARGS,
     "winograd_conv(geometry, x, v, u, m, y): a thread's part of a Winograd convolution, "
     "block after block of images: input transform into u (kept tiles or a workspace), "
     "the 36 GEMMs by v into m, output transform into y (see native_winograd.c)."},
    {"winograd_grad_sums", py_winograd_grad_sums, METH_VARARGS,
     "winograd_grad_sums(geometry, grad, u, v, sums): sums[36, C, O] += a part's filter "
     "gradient tile products, block after block (gradient tiles through v)."},
    {"winograd_filter", py_winograd_filter, METH_VARARGS,
     "winograd_filter(geometry, mat, grid, out): out[a, b] = sum over p, q of mat[a, p] "
     "mat[b, q] grid[p, q] (each an [elements] row, of which pairs first..stop-1; mat "
     "float64), summed in float64: the filter transform G g G^T and the filter "
     "gradient's G^T M G."},
    {"gemm", py_gemm, METH_VARARGS,
     "gemm(geometry, a, b, c): a block of c = op(a) @ op(b), either operand transposed "
     "(the register-blocked kernel of Winograd's GEMMs; blocked and packed for deep inner "
     "dimensions; see native_gemm.c)."},
    {"gemm_paths", py_gemm_paths, METH_NOARGS,
     "gemm_paths(): the vector paths ('avx512', 'avx2') this CPU runs the GEMMs on, best "
     "first; empty where it has neither (then leave GEMMs to NumPy)."},
    {"gemm_path", py_gemm_path, METH_NOARGS,
     "gemm_path(): the path gemm, winograd_gemms, winograd_conv and winograd_grad_sums run "
     "on (the best at load), or None."},
    {"select_gemm_path", py_select_gemm_path, METH_O,
     "select_gemm_path(name): run every GEMM on that path from now on (one of gemm_paths(); "
     "None: no path, the GEMM entry points refuse); call it before any GEMM runs."},
    {"winograd_gemms", py_winograd_gemms, METH_VARARGS,
     "winograd_gemms(geometry, u, w, m): the 36 GEMMs of a block of Winograd tiles "
     "(m[:, t] = u[:, t] @ w[t], or with sums m[t] += u[:, t]^T @ w[:, t]; see native_gemm.c)."},
    /* optimizer updates */
    {"apply_update", py_apply_update, METH_VARARGS,
     "apply_update(kind, scalars, var, slot_a, slot_b, grad, part, parts): one "
     "optimizer's in-place update of part `part` of `parts` (whole cache lines) of var's "
     "elements (kinds: gradient descent, momentum, Nesterov, Adam, RMSProp, Adagrad; see "
     "native_updates.c); False, having written nothing, unless all the arrays are C-contiguous "
     "buffers of var's shape and float32 or float64 kind."},
    /* parallel parts */
    {"run_parts", py_run_parts, METH_VARARGS,
     "run_parts(work, count, threads): work(part) for each part with the calls of the "
     "entry points that record (winograd_conv, winograd_grad_sums, winograd_filter, the "
     "batch norm ones, max_pool, max_pool_grad, im2col, col2im, gemm) recorded, then run with the GIL released, the parts on "
     "up to `threads` threads, each part's calls in order (see native_parts.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Compiled window kernels (see native.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    choose_gemm_path();
    if (init_parts() < 0) {
        PyErr_SetString(PyExc_RuntimeError, "_native: pthread_atfork failed");
        return NULL;
    }
    return PyModule_Create(&module);
}
