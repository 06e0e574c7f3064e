// CUDA C on the CPU: the small part of CUDA that towerflow's kernels use, so
// their source runs as written (towerflow/simgpu/cuda_emulation.py compiles
// each kernel against this header and launches it through ctypes).
//
// What runs as on a GPU: a grid of blocks, each of blockDim threads with
// blockIdx / threadIdx / blockDim / gridDim; __syncthreads() as a real
// barrier (each CUDA thread is a fiber, run one at a time in a fixed order);
// __shared__ arrays of the declared size, one per block, never initialised;
// scalar arguments read as the C type the kernel declares.
//
// What is checked, each a launch error naming the array, the index and the
// thread (the first one found is reported):
// - every global and shared access is inside its array (a pointer parameter
//   covers exactly the array the launch passed);
// - races: a shared element written by one thread and read or written by
//   another with no __syncthreads() between; a global element written by one
//   thread and read or written by a thread of another block, or of the same
//   block with no barrier between;
// - shared memory read before any thread of the block wrote it;
// - a thread that returns while others wait at __syncthreads() (undefined
//   in CUDA);
// - an argument whose size or kind is not the parameter's (a double given to
//   a float parameter, a float64 array to a float*).
//
// NOTE: the Python side rewrites a kernel's pointer types (T* -> dev_ptr<T>)
// and __shared__ arrays (-> Shared<T, N>) before compiling: see
// cuda_emulation.py, rewrite_source.
#pragma once
#include <ucontext.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define TFEMU_ASAN 1
#else
#define TFEMU_ASAN 0
#endif

namespace tfemu {

struct dim3 {
    unsigned int x, y, z;
};
typedef dim3 uint3;

// One argument as the launch passes it (filled by cuda_emulation.py).
struct Arg {
    int is_array;               // 1: a device array (a pointer parameter); 0: a scalar
    char kind;                  // NumPy's dtype.kind: 'f', 'i', 'u', 'b'
    long long itemsize;         // bytes of one element (or of the scalar)
    void* data;                 // the array's first element, or the scalar's bytes
    long long count;            // elements of the array
    const char* dtype_name;     // "float32", ... for messages
    // Set by the launch: who wrote each element in this launch (lazily).
    uint32_t* writer;           // global thread id + 1, 0: not written
    uint32_t* write_epoch;      // the writer's barrier count at the write
    Arg* alias_of;              // an earlier argument with the same memory, or null
};

struct LaunchConfig {
    unsigned int grid[3], block[3];
    long long shared_bytes;     // dynamic shared memory (extern __shared__)
    int reverse;                // run the blocks, and each block's threads, in reverse order
    int uses_barriers;          // the source calls __syncthreads(): run fibers
    char error[1024];           // the first error, "" if none
};

enum ThreadState { READY, WAITING, DONE };

struct Launch {
    LaunchConfig* config;
    dim3 grid, block, block_idx, thread_idx;
    long long block_linear;
    unsigned threads;           // per block
    unsigned current;           // linear index of the running thread
    uint32_t epoch;             // barriers the block has passed
    uint64_t block_generation;  // new per block: resets shared memory
    bool fibers;
    void (*body)();
};

static Launch g_launch;

inline bool failed() { return g_launch.config->error[0] != 0; }

inline void fail(const char* format, ...) {
    if (failed()) return;
    char message[768];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    const Launch& l = g_launch;
    snprintf(l.config->error, sizeof l.config->error,
             "%s (thread (%u,%u,%u) of block (%u,%u,%u))", message, l.thread_idx.x,
             l.thread_idx.y, l.thread_idx.z, l.block_idx.x, l.block_idx.y, l.block_idx.z);
}

inline uint32_t global_thread_id() {
    return (uint32_t)(g_launch.block_linear * g_launch.threads + g_launch.current + 1);
}

inline uint32_t block_of(uint32_t writer) { return (writer - 1) / g_launch.threads; }

// -- the kinds a C type stands for ----------------------------------------------------

template <class V>
constexpr char kind_of() {
    return std::is_same<V, bool>::value ? 'b'
           : std::is_floating_point<V>::value ? 'f'
           : std::is_signed<V>::value ? 'i' : 'u';
}

template <class V>
bool kind_fits(char kind) {
    // Kernels that move bits (unsigned T) take any dtype of their size.
    return kind_of<V>() == kind || (kind_of<V>() == 'u' && kind != 'b');
}

// -- global memory ----------------------------------------------------------------------

inline Arg* owner(Arg* arg) { return arg->alias_of ? arg->alias_of : arg; }

inline bool inside(const Arg* arg, long long index, const char* name, const char* what) {
    if (index >= 0 && index < arg->count) return true;
    fail("%s %s[%lld] is outside the %lld elements the launch passed", what, name, index,
         arg->count);
    return false;
}

inline void check_global_read(Arg* arg, long long index, const char* name) {
    Arg* memory = owner(arg);
    if (!memory->writer || !memory->writer[index]) return;
    uint32_t writer = memory->writer[index], me = global_thread_id();
    if (writer == me) return;
    if (block_of(writer) != block_of(me))
        fail("race: %s[%lld] read here was written by block %u in the same launch "
             "(blocks are not ordered)", name, index, block_of(writer));
    else if (memory->write_epoch[index] == g_launch.epoch)
        fail("race: %s[%lld] read here was written by thread %u of this block with no "
             "__syncthreads() between", name, index, (writer - 1) % g_launch.threads);
}

inline void record_global_write(Arg* arg, long long index, const char* name) {
    Arg* memory = owner(arg);
    if (!memory->writer) {
        memory->writer = (uint32_t*)calloc(memory->count, sizeof(uint32_t));
        memory->write_epoch = (uint32_t*)calloc(memory->count, sizeof(uint32_t));
    }
    uint32_t writer = memory->writer[index], me = global_thread_id();
    if (writer && writer != me &&
        (block_of(writer) != block_of(me) || memory->write_epoch[index] == g_launch.epoch))
        fail("race: %s[%lld] written by two threads in one launch (thread %u of block %u "
             "and this one)", name, index, (writer - 1) % g_launch.threads,
             block_of(writer));
    memory->writer[index] = me;
    memory->write_epoch[index] = g_launch.epoch;
}

// An element of a device array: reads and writes are checked.
template <class T>
struct GlobalRef {
    typedef typename std::remove_const<T>::type V;
    Arg* arg;
    long long index;
    const char* name;

    operator V() const {
        if (!inside(arg, index, name, "read of")) return V();
        check_global_read(arg, index, name);
        return ((const V*)arg->data)[index];
    }
    GlobalRef& operator=(V value) {
        static_assert(!std::is_const<T>::value, "write through a const pointer");
        if (!inside(arg, index, name, "write of")) return *this;
        record_global_write(arg, index, name);
        ((V*)arg->data)[index] = value;
        return *this;
    }
    GlobalRef& operator=(const GlobalRef& other) { return *this = (V)other; }
    GlobalRef& operator+=(V value) { return *this = (V)*this + value; }
    GlobalRef& operator-=(V value) { return *this = (V)*this - value; }
    GlobalRef& operator*=(V value) { return *this = (V)*this * value; }
    GlobalRef& operator/=(V value) { return *this = (V)*this / value; }
};

// A pointer into a device array (what T* becomes).
template <class T>
struct dev_ptr {
    Arg* arg;
    long long offset;
    const char* name;

    GlobalRef<T> operator[](long long index) const { return {arg, offset + index, name}; }
    GlobalRef<T> operator*() const { return (*this)[0]; }
    dev_ptr operator+(long long n) const { return {arg, offset + n, name}; }
    dev_ptr operator-(long long n) const { return {arg, offset - n, name}; }
    dev_ptr& operator+=(long long n) { offset += n; return *this; }
    dev_ptr& operator-=(long long n) { offset -= n; return *this; }
    operator dev_ptr<const T>() const { return {arg, offset, name}; }
};

template <class T>
dev_ptr<T> pointer_arg(Arg* arg, const char* type, const char* name) {
    typedef typename std::remove_const<T>::type V;
    if (!arg->is_array)
        fail("parameter %s is %s but the launch passes a scalar", name, type);
    else if (arg->itemsize != (long long)sizeof(V) || !kind_fits<V>(arg->kind))
        fail("parameter %s is %s but the launch passes a %s array", name, type,
             arg->dtype_name);
    return {arg, 0, name};
}

template <class V>
V scalar_arg(Arg* arg, const char* type, const char* name) {
    V value = V();
    if (arg->is_array)
        fail("parameter %s is %s but the launch passes an array", name, type);
    else if (arg->itemsize != (long long)sizeof(V) || !kind_fits<V>(arg->kind))
        fail("parameter %s is %s (%d bytes) but the launch passes a %s (%lld bytes): the "
             "kernel would read the wrong bytes", name, type, (int)sizeof(V),
             arg->dtype_name, arg->itemsize);
    else
        memcpy(&value, arg->data, sizeof(V));
    return value;
}

// -- shared memory ----------------------------------------------------------------------

const uint32_t SEVERAL = 0xFFFFFFFFu;

// A __shared__ array: one per block, its contents never initialised, every
// access checked against its size and the other threads' accesses.
template <class T, long long N>
struct Shared {
    const char* name;
    uint64_t generation = 0;
    T data[N];
    uint32_t writer[N], write_epoch[N], reader[N], read_epoch[N];

    explicit Shared(const char* array_name) : name(array_name) {}

    void begin_block() {
        if (generation == g_launch.block_generation) return;
        generation = g_launch.block_generation;
        memset((void*)data, 0xFF, sizeof data);     // NaN, -1: never what a sum gives
        memset(writer, 0, sizeof writer);
        memset(reader, 0, sizeof reader);
    }
    bool inside(long long index) {
        if (index >= 0 && index < N) return true;
        fail("access to %s[%lld] past its %lld elements (a block wider than its shared "
             "array?)", name, index, N);
        return false;
    }
    T read(long long index) {
        begin_block();
        if (!inside(index)) return T();
        uint32_t me = g_launch.current + 1, epoch = g_launch.epoch;
        if (!writer[index])
            fail("%s[%lld] read before any thread of the block wrote it", name, index);
        else if (writer[index] != me && write_epoch[index] == epoch)
            fail("race: %s[%lld] read here was written by thread %u with no "
                 "__syncthreads() between", name, index, writer[index] - 1);
        if (read_epoch[index] != epoch || !reader[index]) reader[index] = me;
        else if (reader[index] != me) reader[index] = SEVERAL;
        read_epoch[index] = epoch;
        return data[index];
    }
    void write(long long index, T value) {
        begin_block();
        if (!inside(index)) return;
        uint32_t me = g_launch.current + 1, epoch = g_launch.epoch;
        if (writer[index] && writer[index] != me && write_epoch[index] == epoch)
            fail("race: %s[%lld] written by threads %u and %u with no __syncthreads() "
                 "between", name, index, writer[index] - 1, me - 1);
        else if (reader[index] && reader[index] != me && read_epoch[index] == epoch)
            fail("race: %s[%lld] written here after another thread read it with no "
                 "__syncthreads() between", name, index);
        writer[index] = me;
        write_epoch[index] = epoch;
        data[index] = value;
    }

    struct Ref {
        Shared* array;
        long long index;
        operator T() const { return array->read(index); }
        Ref& operator=(T value) { array->write(index, value); return *this; }
        Ref& operator=(const Ref& other) { return *this = (T)other; }
        Ref& operator+=(T value) { return *this = (T)*this + value; }
        Ref& operator-=(T value) { return *this = (T)*this - value; }
        Ref& operator*=(T value) { return *this = (T)*this * value; }
    };
    Ref operator[](long long index) { return {this, index}; }
};

// -- threads and barriers ---------------------------------------------------------------

const unsigned MAX_THREADS = 1024;
const size_t STACK_BYTES = TFEMU_ASAN ? 512 * 1024 : 128 * 1024;
const size_t PAGE = 4096;

struct Fibers {
    char* stacks = nullptr;                 // MAX_THREADS stacks, each after a guard page
    ucontext_t scheduler, threads[MAX_THREADS];
    ThreadState state[MAX_THREADS];
    const void* scheduler_stack = nullptr;  // for ASan's fiber switches
    size_t scheduler_stack_size = 0;
};

static Fibers g_fibers;

inline char* stack_of(unsigned thread) {
    return g_fibers.stacks + (size_t)thread * (STACK_BYTES + PAGE) + PAGE;
}

inline bool make_stacks() {
    if (g_fibers.stacks) return true;
    size_t bytes = (size_t)MAX_THREADS * (STACK_BYTES + PAGE);
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return false;
    g_fibers.stacks = (char*)memory;
    for (unsigned t = 0; t < MAX_THREADS; ++t)      // a stack overflow faults
        mprotect(stack_of(t) - PAGE, PAGE, PROT_NONE);
    return true;
}

inline void switch_to(ucontext_t* from, ucontext_t* to, const void* stack, size_t size,
                      bool leaving_for_good) {
#if TFEMU_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(leaving_for_good ? nullptr : &fake_stack, stack, size);
    swapcontext(from, to);
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
    (void)stack; (void)size; (void)leaving_for_good;
    swapcontext(from, to);
#endif
}

inline void set_thread(unsigned linear) {
    Launch& l = g_launch;
    l.current = linear;
    l.thread_idx = {linear % l.block.x, (linear / l.block.x) % l.block.y,
                    linear / (l.block.x * l.block.y)};
}

inline void fiber_main() {
#if TFEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_fibers.scheduler_stack,
                                    &g_fibers.scheduler_stack_size);
#endif
    unsigned me = g_launch.current;
    g_launch.body();
    g_fibers.state[me] = DONE;
    switch_to(&g_fibers.threads[me], &g_fibers.scheduler, g_fibers.scheduler_stack,
              g_fibers.scheduler_stack_size, true);
}

inline void syncthreads() {
    if (!g_launch.fibers) {
        fail("__syncthreads() in a kernel launched without barriers");
        return;
    }
    unsigned me = g_launch.current;
    g_fibers.state[me] = WAITING;
    switch_to(&g_fibers.threads[me], &g_fibers.scheduler, g_fibers.scheduler_stack,
              g_fibers.scheduler_stack_size, false);
}

// Runs every READY thread until it waits or returns; false when none is left.
inline bool run_until_barrier() {
    Launch& l = g_launch;
    for (unsigned k = 0; k < l.threads; ++k) {
        unsigned t = l.config->reverse ? l.threads - 1 - k : k;
        if (g_fibers.state[t] != READY) continue;
        set_thread(t);
        switch_to(&g_fibers.scheduler, &g_fibers.threads[t], stack_of(t), STACK_BYTES, false);
    }
    unsigned waiting = 0, done = 0;
    for (unsigned t = 0; t < l.threads; ++t)
        waiting += g_fibers.state[t] == WAITING, done += g_fibers.state[t] == DONE;
    if (waiting && done) {
        set_thread(0);
        fail("%u threads returned while %u wait at __syncthreads() (undefined in CUDA)",
             done, waiting);
    }
    for (unsigned t = 0; t < l.threads; ++t)
        if (g_fibers.state[t] == WAITING) g_fibers.state[t] = READY;
    ++l.epoch;
    return waiting > 0;
}

inline void run_block_with_fibers() {
    for (unsigned t = 0; t < g_launch.threads; ++t) {
        getcontext(&g_fibers.threads[t]);
        g_fibers.threads[t].uc_stack.ss_sp = stack_of(t);
        g_fibers.threads[t].uc_stack.ss_size = STACK_BYTES;
        g_fibers.threads[t].uc_link = &g_fibers.scheduler;
        makecontext(&g_fibers.threads[t], fiber_main, 0);
        g_fibers.state[t] = READY;
    }
    while (run_until_barrier()) {
    }
}

inline void run_block_in_turn() {
    for (unsigned k = 0; k < g_launch.threads; ++k) {
        set_thread(g_launch.config->reverse ? g_launch.threads - 1 - k : k);
        g_launch.body();
    }
}

inline unsigned at_least_one(unsigned value) { return value ? value : 1; }

// Runs ``body`` (the kernel called with its arguments) on every thread of
// every block; returns 0, or 1 with config->error set.
inline int launch(LaunchConfig* config, void (*body)()) {
    Launch& l = g_launch;
    l.config = config;
    l.body = body;
    // NOTE: CuPy launches at least one block of one thread along each axis.
    l.grid = {at_least_one(config->grid[0]), at_least_one(config->grid[1]),
              at_least_one(config->grid[2])};
    l.block = {at_least_one(config->block[0]), at_least_one(config->block[1]),
               at_least_one(config->block[2])};
    l.threads = l.block.x * l.block.y * l.block.z;
    l.fibers = config->uses_barriers;
    if (l.threads > MAX_THREADS) {
        snprintf(config->error, sizeof config->error,
                 "a block of %u threads: CUDA allows at most %u", l.threads, MAX_THREADS);
        return 1;
    }
    if (l.fibers && !make_stacks()) {
        snprintf(config->error, sizeof config->error, "cannot map the threads' stacks");
        return 1;
    }
    long long blocks = (long long)l.grid.x * l.grid.y * l.grid.z;
    for (long long k = 0; k < blocks && !failed(); ++k) {
        // NOTE: reverse runs the blocks last to first too, so a block that reads
        // what a later block writes (no order between blocks) shows as a race.
        long long b = l.block_linear = config->reverse ? blocks - 1 - k : k;
        l.block_idx = {(unsigned)(b % l.grid.x), (unsigned)(b / l.grid.x % l.grid.y),
                       (unsigned)(b / ((long long)l.grid.x * l.grid.y))};
        l.epoch = 0;
        ++l.block_generation;
        if (l.fibers) run_block_with_fibers();
        else run_block_in_turn();
    }
    return failed() ? 1 : 0;
}

inline void free_shadows(Arg* args, int count) {
    for (int a = 0; a < count; ++a) {
        free(args[a].writer);
        free(args[a].write_epoch);
        args[a].writer = args[a].write_epoch = nullptr;
    }
}

// -- the CUDA names kernels use -----------------------------------------------------------

template <class A, class B>
inline auto max(A a, B b) -> typename std::common_type<A, B>::type {
    return a > b ? a : b;
}
template <class A, class B>
inline auto min(A a, B b) -> typename std::common_type<A, B>::type {
    return a < b ? a : b;
}
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

}  // namespace tfemu

using std::exp;
using std::expm1;
using std::fabs;
using std::log;
using std::log1p;
using std::pow;
using std::sqrt;
using std::tanh;
using std::fmax;
using std::fmin;
using tfemu::max;
using tfemu::min;
using tfemu::rsqrt;
using tfemu::rsqrtf;
using tfemu::dim3;
using tfemu::uint3;

#define blockIdx (::tfemu::g_launch.block_idx)
#define threadIdx (::tfemu::g_launch.thread_idx)
#define blockDim (::tfemu::g_launch.block)
#define gridDim (::tfemu::g_launch.grid)
#define __syncthreads() ::tfemu::syncthreads()
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
