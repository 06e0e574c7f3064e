/* Parallel parts without the GIL: run_parts and its pool of C threads.
 *
 * The CPU pool (cpu_threads.py) hands each part of a kernel to a Python
 * thread, which takes the GIL to run the part's few lines of Python before
 * the compiled call releases it again. On the 2-core VM every such hand-off
 * (a thread blocked on the GIL or on a queue is woken through the
 * hypervisor) cost about 50 us: 52 of them in a cifar10 step of 27 ms at
 * batch 64. Here the calling thread runs every part's Python itself, with
 * the compiled calls *recorded* instead of run (each entry point that
 * accepts this parses its arguments, holds its buffers and hands a Task to
 * submit()); then it releases the GIL once, and the parts' recorded calls
 * run on it and on C threads that never take the GIL, spinning a short while
 * between jobs (a part handed to a spinning thread costs under 1 us).
 *
 * A call that cannot allocate its workspace (the blocked GEMM's packed operands)
 * says so in its Task; run_parts raises MemoryError after the run.
 *
 * A part's calls run in the order they were recorded, on one thread. So a
 * part may only *prepare* work: compute arguments, allocate arrays, and call
 * entry points that record; it must not read what its recorded calls write
 * (they have not run yet). An entry point that cannot record (its
 * RUN_WITHOUT_GIL runs at once) makes run_parts raise RuntimeError: its
 * values could be read or overwritten out of order. NumPy work in a part
 * cannot be detected: the callers (cpu_threads.WorkerPool.run_compiled)
 * promise there is none.
 */
#include "native_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_FUTEX 1
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a C thread spins for the next job before it sleeps: long enough to
 * cover the Python between two kernels of a step (tens of microseconds), short
 * enough to give its core back soon to a data-loading thread. Waking a
 * sleeping thread costs 25-70 us here (measured in a 2-core VM). */
#define SPIN_NS 200000L
/* The most C threads (beside the caller's) the pool starts. */
#define MAX_HELPERS 255

/* == recording (only ever touched with the GIL held) ================================== */

static struct {
    int active;
    unsigned long thread;   /* the recording thread's PyThread_get_thread_ident() */
    Task **heads, **tails;  /* each part's calls, in order */
    Py_ssize_t part;        /* the part being recorded */
    const char *immediate;  /* the first kernel that ran at once while recording */
} recording;

static int recording_here(void)
{
    return recording.active && recording.thread == PyThread_get_thread_ident();
}

void *new_task(size_t size, void (*run)(Task *))
{
    Task *task = PyMem_Calloc(1, size);
    if (!task) {
        PyErr_NoMemory();
        return NULL;
    }
    task->run = run;
    return task;
}

void discard(Task *task)
{
    release_all(&task->views);
    PyMem_Free(task);
}

PyObject *submit(Task *task)
{
    if (recording_here()) {
        Py_ssize_t part = recording.part;
        if (recording.tails[part])
            recording.tails[part]->next = task;
        else
            recording.heads[part] = task;
        recording.tails[part] = task;
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    task->run(task);
    Py_END_ALLOW_THREADS
    const char *out_of_memory = task->out_of_memory;
    discard(task);
    if (out_of_memory)
        return PyErr_Format(PyExc_MemoryError, "%s", out_of_memory);
    Py_RETURN_NONE;
}

void note_immediate_run(const char *name)
{
    if (recording_here() && !recording.immediate)
        recording.immediate = name;
}

/* Release and free every part's calls; the first out_of_memory of those that ran
 * (NULL if none). */
static const char *discard_parts(Task **heads, Py_ssize_t count)
{
    const char *out_of_memory = NULL;
    for (Py_ssize_t part = 0; part < count; part++) {
        Task *task = heads[part];
        while (task) {
            Task *next = task->next;
            if (!out_of_memory)
                out_of_memory = task->out_of_memory;
            discard(task);
            task = next;
        }
    }
    return out_of_memory;
}

/* == the pool ========================================================================== */

/* One job at a time (pool_busy). Its parts are claimed by the caller and the
 * helpers alike, so a stalled thread holds up one part only. A claim is a
 * compare-and-swap of (job number, the parts' claims) in one word: a helper
 * late from the last job fails it, instead of taking a part of the next job
 * that is also claimed by another thread.
 *
 * The parts' claims: in a job of at most MASK_PARTS parts, a mask of the
 * claimed parts (the bits from `count` on set from the start), and each thread
 * claims its home parts first: thread t of T takes parts [count t / T, count
 * (t + 1) / T) when none is late. The kernels split the batch alike, so each
 * thread then reads the rows it wrote in the kernel before: data written by
 * the other core read 1.5x slower on the 2-core VM (measured: a NumPy add of
 * a batch-norm output, 94-103 us when the pool wrote it, 67 us when one core
 * did), and with parts taken in order whichever thread came first took part
 * 0. In a bigger job, COUNTER_MODE | the next unclaimed part. */
static struct {
    Task **parts;
    _Atomic Py_ssize_t count;
    _Atomic uint64_t claims;     /* job number << 32 | the parts' claims (above) */
    _Atomic int done;            /* parts finished (an int: the caller's futex) */
    _Atomic int caller_sleeps;   /* 1 while the caller sleeps on done (see wait_for_change) */
    _Atomic int helpers;         /* helpers 1..helpers may take parts (`threads` - 1) */
} job;

static _Atomic int job_seq;          /* the job number, once its parts may be claimed */
static _Atomic int helpers_asleep;
static _Atomic int pool_busy;
static int helpers_started;          /* changed under the GIL only */

static long elapsed_ns(const struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000000000L + (now.tv_nsec - since->tv_nsec);
}

static void futex_wait(_Atomic int *address, int value)
{
#ifdef HAVE_FUTEX
    syscall(SYS_futex, (int *)address, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
#else
    (void)address, (void)value;
    sched_yield();
#endif
}

static void futex_wake(_Atomic int *address)
{
#ifdef HAVE_FUTEX
    syscall(SYS_futex, (int *)address, FUTEX_WAKE_PRIVATE, MAX_HELPERS + 1, NULL, NULL, 0);
#else
    (void)address;
#endif
}

/* Spin (up to spin_ns) until *address differs from value, then sleep on it
 * (sleepers counts the sleeping threads, so that the changer knows to wake them). */
static void wait_for_change(_Atomic int *address, int value, _Atomic int *sleepers,
                            long spin_ns)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (unsigned spins = 1; atomic_load(address) == value; spins++) {
        CPU_RELAX();
        if ((spins % 256 == 0 && elapsed_ns(&start) > spin_ns) || spin_ns == 0) {
            atomic_fetch_add(sleepers, 1);
            while (atomic_load(address) == value)
                futex_wait(address, value);
            atomic_fetch_sub(sleepers, 1);
            return;
        }
    }
}

static void run_part(Task *task)
{
    for (; task; task = task->next)
        task->run(task);
}

#define MASK_PARTS 31
#define COUNTER_MODE ((uint64_t)1 << 31)

/* The claims word of a new job (see job). */
static uint64_t first_claims(uint32_t number, Py_ssize_t count)
{
    uint64_t parts = count > MASK_PARTS ? COUNTER_MODE
                                        : (COUNTER_MODE - 1) & ~(((uint64_t)1 << count) - 1);
    return (uint64_t)number << 32 | parts;
}

/* Claim a part of job `number`: `part` itself if the job has a mask, else the next
 * in order. The part claimed, -1 if none is left (or the job is another's), or
 * -2 if `part` was taken already. Whatever `count` a late helper read, the word
 * alone decides: a job's count is stored after its claims (run_job), so a count
 * newer than the word read fails the compare-and-swap. */
static Py_ssize_t claim(uint32_t number, Py_ssize_t part, Py_ssize_t count)
{
    uint64_t claims = atomic_load(&job.claims);
    for (;;) {
        if ((uint32_t)(claims >> 32) != number)
            return -1;
        uint64_t wanted;
        if (claims & COUNTER_MODE) {
            part = (Py_ssize_t)(claims & (COUNTER_MODE - 1));
            if (part >= count)
                return -1;
            wanted = claims + 1;
        } else if ((uint32_t)claims == (uint32_t)(COUNTER_MODE - 1)) {
            return -1;
        } else if (part >= MASK_PARTS || claims >> part & 1) {
            return -2;
        } else {
            wanted = claims | (uint64_t)1 << part;
        }
        if (atomic_compare_exchange_weak(&job.claims, &claims, wanted))
            return part;
    }
}

static void run_one_part(Py_ssize_t part)
{
    run_part(job.parts[part]);
    atomic_fetch_add(&job.done, 1);
    if (atomic_load(&job.caller_sleeps))
        futex_wake(&job.done);
}

/* The parts of job `number` that thread `thread` (0: the caller, 1..: helpers) can
 * claim, its home parts first (see job). */
static void run_claimed_parts(uint32_t number, int thread)
{
    const Py_ssize_t count = atomic_load(&job.count);
    const Py_ssize_t threads = (Py_ssize_t)atomic_load(&job.helpers) + 1;
    const Py_ssize_t home = count > 0 ? count * (thread % threads) / threads : 0;
    for (Py_ssize_t step = 0;; step++) {
        Py_ssize_t part = claim(number, count > 0 ? (home + step) % count : 0, count);
        if (part == -1)
            return;
        if (part >= 0)
            run_one_part(part);
    }
}

/* Helper number `index` (1, 2, ...): the parts of each job that lets it join. One
 * left out (started for a bigger pool than the job's) sleeps again at once. */
static void *serve(void *index)
{
    const int number_of_this_helper = (int)(intptr_t)index;
    int seen = atomic_load(&job_seq), joined = 1;
    for (;;) {
        wait_for_change(&job_seq, seen, &helpers_asleep, joined ? SPIN_NS : 0);
        seen = atomic_load(&job_seq);
        joined = number_of_this_helper <= atomic_load(&job.helpers);
        if (joined)
            run_claimed_parts((uint32_t)seen, number_of_this_helper);
    }
    return NULL;
}

/* Helpers 1..wanted started (as many as could be: a failed pthread_create is
 * tried again by the next job); how many of them this job may use. */
static int start_helpers(int wanted)
{
    if (wanted > MAX_HELPERS)
        wanted = MAX_HELPERS;
    while (helpers_started < wanted) {
        pthread_attr_t attributes;
        pthread_t thread;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attributes, serve,
                                    (void *)(intptr_t)(helpers_started + 1));
        pthread_attr_destroy(&attributes);
        if (failed)
            break;
        helpers_started++;
    }
    return helpers_started < wanted ? helpers_started : wanted;
}

/* Every part's calls, on the caller and helpers 1..helpers; back when all have run. */
static void run_job(Task **parts, Py_ssize_t count, int helpers)
{
    const uint32_t number = (uint32_t)atomic_load(&job_seq) + 1;
    job.parts = parts;
    atomic_store(&job.helpers, helpers);
    atomic_store(&job.done, 0);
    atomic_store(&job.claims, first_claims(number, count));
    atomic_store(&job.count, count);         /* after the claims: see claim() */
    atomic_store(&job_seq, (int)number);
    if (atomic_load(&helpers_asleep))
        futex_wake(&job_seq);
    run_claimed_parts(number, 0);
    for (int done; (done = atomic_load(&job.done)) < count;)
        wait_for_change(&job.done, done, &job.caller_sleeps, SPIN_NS);
}

static void run_serially(Task **parts, Py_ssize_t count)
{
    for (Py_ssize_t part = 0; part < count; part++)
        run_part(parts[part]);
}

static void forget_pool_after_fork(void)
{
    /* threads do not survive fork: the child starts its own on its first job */
    helpers_started = 0;
    atomic_store(&helpers_asleep, 0);
    atomic_store(&pool_busy, 0);
    recording.active = 0;
}

int init_parts(void)
{
    return pthread_atfork(NULL, NULL, forget_pool_after_fork) == 0 ? 0 : -1;
}

/* == run_parts ========================================================================= */

static int call_part(PyObject *work, Py_ssize_t part)
{
    PyObject *result = PyObject_CallFunction(work, "n", part);
    if (!result)
        return -1;
    Py_DECREF(result);
    return 0;
}

static PyObject *record_and_run(PyObject *work, Py_ssize_t count, int threads)
{
    Task **heads = PyMem_Calloc((size_t)count, sizeof(Task *));
    Task **tails = PyMem_Calloc((size_t)count, sizeof(Task *));
    if (!heads || !tails) {
        PyMem_Free(heads);
        PyMem_Free(tails);
        return PyErr_NoMemory();
    }
    recording.active = 1;
    recording.thread = PyThread_get_thread_ident();
    recording.heads = heads;
    recording.tails = tails;
    recording.immediate = NULL;
    int failed = 0;
    for (Py_ssize_t part = 0; part < count && !failed; part++) {
        recording.part = part;
        failed = call_part(work, part) < 0;
        if (!failed && recording.immediate) {
            PyErr_Format(PyExc_RuntimeError, "run_parts: part %zd called %s, which runs at "
                         "once instead of recording: parts may only call the kernels that "
                         "record (see native_parts.c)", part, recording.immediate);
            failed = 1;
        }
    }
    recording.active = 0;
    if (!failed) {
        const int pool = threads > 1 && count > 1 && !atomic_exchange(&pool_busy, 1);
        const int helpers = pool ? start_helpers(threads - 1) : 0;
        Py_BEGIN_ALLOW_THREADS
        if (helpers > 0)
            run_job(heads, count, helpers);
        else
            run_serially(heads, count);
        Py_END_ALLOW_THREADS
        if (pool)
            atomic_store(&pool_busy, 0);
    }
    const char *out_of_memory = discard_parts(heads, count);
    PyMem_Free(heads);
    PyMem_Free(tails);
    if (failed)
        return NULL;
    if (out_of_memory)
        return PyErr_Format(PyExc_MemoryError, "%s", out_of_memory);
    Py_RETURN_NONE;
}

/* run_parts(work, count, threads): see the top of this file. */
PyObject *py_run_parts(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *work;
    Py_ssize_t count;
    int threads;
    if (!PyArg_ParseTuple(args, "Oni:run_parts", &work, &count, &threads))
        return NULL;
    if (count < 0 || count > INT32_MAX || threads < 1) {
        PyErr_Format(PyExc_ValueError, "run_parts: expected 0 <= count < 2**31 and "
                     "threads >= 1, got count %zd and threads %d", count, threads);
        return NULL;
    }
    if (recording.active) {
        /* nested in a part being recorded (its calls join that part, in order), or
         * called from another Python thread meanwhile (its calls run at once) */
        for (Py_ssize_t part = 0; part < count; part++)
            if (call_part(work, part) < 0)
                return NULL;
        Py_RETURN_NONE;
    }
    if (count == 0)
        Py_RETURN_NONE;
    return record_and_run(work, count, threads);
}
