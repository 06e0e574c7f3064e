/* The optimizer updates (native_updates.py) and their entry point. */
#include "native_common.h"

/* == optimizer updates (native_updates.py) ============================================ */

/* The in-place updates of ApplyGradientDescent, ApplyMomentum (plain and
 * Nesterov), ApplyAdam, ApplyRMSProp and ApplyAdagrad over elements [first,
 * stop) of a variable: one pass reading var, its slots and grad once and
 * writing var and the slots once, where training_kernels.py's NumPy chains
 * make three to eleven whole-array passes. Each computes the NumPy chain's
 * expressions in the same order, every operation rounded to T: no FMA
 * contraction (fp-contract=off), and sqrt and division are IEEE's, as
 * NumPy's, so the results are NumPy's bit for bit in float32 and float64.
 * Scalars (s[0..4]) arrive as doubles holding values of type T (the caller
 * computes them in T, as the NumPy kernels do): converting back is exact. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off", "no-trapping-math")
#endif

enum { UPDATE_GD, UPDATE_MOMENTUM, UPDATE_NESTEROV, UPDATE_ADAM, UPDATE_RMS_PROP,
       UPDATE_ADAGRAD, UPDATE_KINDS };

/* Slots each update reads and writes (besides var), and its scalars. */
static const int update_slots[UPDATE_KINDS] = {0, 1, 1, 2, 2, 1};

#define DEFINE_UPDATES(T, SQRT, SUFFIX)                                                 \
/* var = var * decay - grad * lr   (s: lr, decay) */                                    \
CPU_CLONES static void update_gd_##SUFFIX(T *restrict var, const T *restrict grad,      \
                                          const double *s, Py_ssize_t first,           \
                                          Py_ssize_t stop)                             \
{                                                                                       \
    const T lr = (T)s[0], decay = (T)s[1];                                              \
    for (Py_ssize_t i = first; i < stop; i++)                                           \
        var[i] = var[i] * decay - grad[i] * lr;                                         \
}                                                                                       \
                                                                                        \
/* accum = accum * momentum + grad; var = var * decay - step, step = accum * lr or     \
 * (Nesterov) (accum * momentum + grad) * lr   (s: lr, momentum, decay) */             \
CPU_CLONES static void update_momentum_##SUFFIX(T *restrict var, T *restrict accum,     \
                                                const T *restrict grad, const double *s, \
                                                int nesterov, Py_ssize_t first,        \
                                                Py_ssize_t stop)                       \
{                                                                                       \
    const T lr = (T)s[0], momentum = (T)s[1], decay = (T)s[2];                          \
    if (nesterov)                                                                       \
        for (Py_ssize_t i = first; i < stop; i++) {                                     \
            const T a = accum[i] * momentum + grad[i];                                  \
            accum[i] = a;                                                               \
            var[i] = var[i] * decay - (a * momentum + grad[i]) * lr;                    \
        }                                                                               \
    else                                                                                \
        for (Py_ssize_t i = first; i < stop; i++) {                                     \
            const T a = accum[i] * momentum + grad[i];                                  \
            accum[i] = a;                                                               \
            var[i] = var[i] * decay - a * lr;                                           \
        }                                                                               \
}                                                                                       \
                                                                                        \
/* m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2);                     \
 * var = var * decay - m / (sqrt(v) + epsilon) * alpha                                 \
 * (s: alpha, 1 - beta1, 1 - beta2, epsilon, decay) */                                 \
CPU_CLONES static void update_adam_##SUFFIX(T *restrict var, T *restrict m,             \
                                            T *restrict v, const T *restrict grad,     \
                                            const double *s, Py_ssize_t first,         \
                                            Py_ssize_t stop)                           \
{                                                                                       \
    const T alpha = (T)s[0], keep1 = (T)s[1], keep2 = (T)s[2], epsilon = (T)s[3];       \
    const T decay = (T)s[4];                                                            \
    for (Py_ssize_t i = first; i < stop; i++) {                                         \
        const T g = grad[i];                                                            \
        const T mi = m[i] + (g - m[i]) * keep1;                                         \
        const T vi = v[i] + (g * g - v[i]) * keep2;                                     \
        m[i] = mi;                                                                      \
        v[i] = vi;                                                                      \
        var[i] = var[i] * decay - mi / (SQRT(vi) + epsilon) * alpha;                    \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* ms += (grad^2 - ms) * (1 - rho); mom = mom * momentum + grad / sqrt(ms + epsilon)   \
 * * lr; var -= mom   (s: lr, 1 - rho, momentum, epsilon) */                           \
CPU_CLONES static void update_rms_prop_##SUFFIX(T *restrict var, T *restrict ms,        \
                                                T *restrict mom, const T *restrict grad, \
                                                const double *s, Py_ssize_t first,     \
                                                Py_ssize_t stop)                       \
{                                                                                       \
    const T lr = (T)s[0], keep = (T)s[1], momentum = (T)s[2], epsilon = (T)s[3];         \
    for (Py_ssize_t i = first; i < stop; i++) {                                         \
        const T g = grad[i];                                                            \
        const T msi = ms[i] + (g * g - ms[i]) * keep;                                   \
        const T momi = mom[i] * momentum + g / SQRT(msi + epsilon) * lr;                \
        ms[i] = msi;                                                                    \
        mom[i] = momi;                                                                  \
        var[i] = var[i] - momi;                                                         \
    }                                                                                   \
}                                                                                       \
                                                                                        \
/* accum += grad^2; var -= grad / sqrt(accum) * lr   (s: lr) */                        \
CPU_CLONES static void update_adagrad_##SUFFIX(T *restrict var, T *restrict accum,      \
                                               const T *restrict grad, const double *s, \
                                               Py_ssize_t first, Py_ssize_t stop)      \
{                                                                                       \
    const T lr = (T)s[0];                                                               \
    for (Py_ssize_t i = first; i < stop; i++) {                                         \
        const T g = grad[i];                                                            \
        const T a = accum[i] + g * g;                                                   \
        accum[i] = a;                                                                   \
        var[i] = var[i] - g / SQRT(a) * lr;                                             \
    }                                                                                   \
}                                                                                       \
                                                                                        \
static void update_##SUFFIX(int kind, T *var, T *slot_a, T *slot_b, const T *grad,     \
                            const double *s, Py_ssize_t first, Py_ssize_t stop)        \
{                                                                                       \
    switch (kind) {                                                                     \
    case UPDATE_GD: update_gd_##SUFFIX(var, grad, s, first, stop); break;               \
    case UPDATE_MOMENTUM:                                                               \
    case UPDATE_NESTEROV:                                                               \
        update_momentum_##SUFFIX(var, slot_a, grad, s, kind == UPDATE_NESTEROV, first,  \
                                 stop);                                                 \
        break;                                                                          \
    case UPDATE_ADAM: update_adam_##SUFFIX(var, slot_a, slot_b, grad, s, first, stop); break; \
    case UPDATE_RMS_PROP:                                                               \
        update_rms_prop_##SUFFIX(var, slot_a, slot_b, grad, s, first, stop);            \
        break;                                                                          \
    default: update_adagrad_##SUFFIX(var, slot_a, grad, s, first, stop); break;         \
    }                                                                                   \
}

DEFINE_UPDATES(float, __builtin_sqrtf, f32)
DEFINE_UPDATES(double, __builtin_sqrt, f64)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* A view of obj for an update (NULL for None): 0 with *data set, 1 if obj is not a
 * C-contiguous buffer of `kind` (0: float32 or float64) shaped as `like` (then the
 * update is not taken: no error is left set), -1 on an error. */
static int take_for_update(Views *views, PyObject *obj, int writable, char kind,
                           const Py_buffer *like, void **data)
{
    *data = NULL;
    if (obj == Py_None)
        return 0;
    const Py_buffer *view = hold_view(views, obj, writable);
    if (!view) {
        /* not a buffer (TypeError), not C-contiguous (BufferError), read-only
         * (NumPy's ValueError): NumPy's chain runs, and says what is wrong */
        if (!PyErr_ExceptionMatches(PyExc_TypeError)
            && !PyErr_ExceptionMatches(PyExc_BufferError)
            && !PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    *data = view->buf;
    const char got = kind_of(view);
    int same = (kind ? got == kind : got == 'f' || got == 'd')
               && (like == NULL || (view->ndim == like->ndim && view->len == like->len));
    for (int i = 0; same && like && i < like->ndim; i++)
        same = view->shape[i] == like->shape[i];
    return same ? 0 : 1;
}

PyObject *py_apply_update(PyObject *self, PyObject *args)
{
    (void)self;
    int kind;
    Py_ssize_t part, parts;
    double s[5];
    PyObject *var_obj, *slot_a_obj, *slot_b_obj, *grad_obj;
    if (!PyArg_ParseTuple(args, "i(ddddd)OOOOnn:apply_update", &kind, &s[0], &s[1], &s[2],
                          &s[3], &s[4], &var_obj, &slot_a_obj, &slot_b_obj, &grad_obj,
                          &part, &parts))
        return NULL;
    if (kind < 0 || kind >= UPDATE_KINDS || parts < 1 || part < 0 || part >= parts
        || var_obj == Py_None || grad_obj == Py_None
        || (slot_a_obj == Py_None) != (update_slots[kind] < 1)
        || (slot_b_obj == Py_None) != (update_slots[kind] < 2)) {
        PyErr_Format(PyExc_ValueError, "apply_update: kind %d (expected 0..%d, with its "
                     "slots), part %zd of %zd", kind, UPDATE_KINDS - 1, part, parts);
        return NULL;
    }
    Views views = {.held = 0};
    void *var, *slot_a, *slot_b, *grad;
    int taken = take_for_update(&views, var_obj, 1, 0, NULL, &var);
    const Py_buffer *like = views.held ? &views.views[0] : NULL;
    const char type = like ? kind_of(like) : 0;
    if (taken == 0)
        taken = take_for_update(&views, slot_a_obj, 1, type, like, &slot_a);
    if (taken == 0)
        taken = take_for_update(&views, slot_b_obj, 1, type, like, &slot_b);
    if (taken == 0)
        taken = take_for_update(&views, grad_obj, 0, type, like, &grad);
    if (taken != 0) {
        release_all(&views);
        if (taken < 0)
            return NULL;
        Py_RETURN_FALSE;
    }
    /* parts of whole 64-byte lines: floor(units * part / parts) lines, without overflow */
    const Py_ssize_t size = like->len / like->itemsize, line = 64 / like->itemsize;
    const Py_ssize_t units = size / line + (size % line != 0);
#define UPDATE_EDGE(p) ((p) == parts ? size : line * (units / parts * (p)                \
                                                      + units % parts * (p) / parts))
    const Py_ssize_t first = UPDATE_EDGE(part), stop = UPDATE_EDGE(part + 1);
#undef UPDATE_EDGE
    RUN_WITHOUT_GIL(type, update, kind, var, slot_a, slot_b, grad, s, first, stop);
    release_all(&views);
    Py_RETURN_TRUE;
}

/* == end of optimizer updates ========================================================= */
