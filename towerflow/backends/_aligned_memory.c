/* NumPy's data allocator with 64-byte aligned blocks (aligned_memory.py).
 *
 * glibc's malloc gives 16-byte alignment: three in four of the cifar10 step's
 * big arrays started inside a cache line, so every 64-byte vector the compiled
 * kernels read or wrote there spanned two lines. Blocks of ALIGN_FROM bytes
 * or more come from posix_memalign (freed by free() like any other block);
 * smaller ones from malloc, as before. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>

#include <stdlib.h>
#include <string.h>

#define ALIGNMENT 64
#define ALIGN_FROM 4096

static void *aligned_malloc(void *ctx, size_t size)
{
    (void)ctx;
    if (size < ALIGN_FROM)
        return malloc(size ? size : 1);
    void *block = NULL;
    return posix_memalign(&block, ALIGNMENT, size) == 0 ? block : NULL;
}

static void *aligned_calloc(void *ctx, size_t count, size_t item_size)
{
    if (item_size && count > (size_t)-1 / item_size)
        return NULL;
    const size_t size = count * item_size;
    if (size < ALIGN_FROM)
        return calloc(count ? count : 1, item_size ? item_size : 1);
    void *block = aligned_malloc(ctx, size);
    if (block)
        memset(block, 0, size);
    return block;
}

static void *aligned_realloc(void *ctx, void *block, size_t size)
{
    (void)ctx;
    /* NOTE: may give back a block that is not aligned (NumPy reallocates only
     * while building arrays of unknown size, e.g. fromiter): still correct */
    return realloc(block, size ? size : 1);
}

static void aligned_free(void *ctx, void *block, size_t size)
{
    (void)ctx, (void)size;
    free(block);
}

static PyDataMem_Handler handler = {
    "towerflow_aligned64", 1,
    {NULL, aligned_malloc, aligned_calloc, aligned_realloc, aligned_free},
};

static PyObject *py_handler(PyObject *self, PyObject *args)
{
    (void)self, (void)args;
    return PyCapsule_New(&handler, "mem_handler", NULL);
}

static PyObject *py_set_handler(PyObject *self, PyObject *capsule)
{
    (void)self;
    return PyDataMem_SetHandler(capsule == Py_None ? NULL : capsule);
}

static PyMethodDef methods[] = {
    {"handler", py_handler, METH_NOARGS,
     "handler(): a new capsule of the 64-byte aligned allocator."},
    {"set_handler", py_set_handler, METH_O,
     "set_handler(capsule): NumPy's allocator in this context from now on (None: "
     "NumPy's default); gives back the one it replaces."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_aligned_memory",
    "NumPy's data allocator with 64-byte aligned blocks (see aligned_memory.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__aligned_memory(void)
{
    import_array();
    return PyModule_Create(&module);
}
