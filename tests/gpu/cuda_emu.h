// Runs the fused attention's CUDA kernel source (kernels/flash_fwd.cu,
// kernels/flash_bwd.cu) on the CPU: each CUDA thread of a block a fiber
// (ucontext to start it, __builtin_setjmp/longjmp to switch) on one OS
// thread, blocks one after another, __syncthreads and the warp-wide
// instructions (shuffles, ldmatrix, mma.sync) emulated as the PTX manual
// defines their lanes' operands and results, cp.async as a copy made either
// at once (emu_cp_deferred 0) or only when the issuing thread waits for it
// (1: a read before the wait and the barrier after it sees stale data). It
// checks what a machine without a GPU can: the kernels' index arithmetic,
// masking, fragment layouts and synchronisation points. Include it before the
// kernel sources, in one translation unit.
#ifndef QAC_CUDA_EMU_H
#define QAC_CUDA_EMU_H

#define QAC_FA_EMULATE 1
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

void emu_yield();

// A barrier among fibers: arrive, then let the others run until the last
// one arrives.
class emu_barrier {
    long expected, arrived = 0, phase = 0;

  public:
    explicit emu_barrier(long n) : expected(n) {}
    void arrive_and_wait() {
        const long ph = phase;
        if (++arrived == expected) {
            arrived = 0;
            phase++;
        } else {
            while (phase == ph) emu_yield();
        }
    }
    void arrive_and_drop() { // leave for good: later phases wait for one thread fewer
        if (--expected > 0 && arrived == expected) {
            arrived = 0;
            phase++;
        }
    }
};

struct emu_dim {
    unsigned x, y, z;
};
// the running fiber's (set by the scheduler before it resumes one)
inline emu_dim threadIdx, blockIdx, blockDim, gridDim;

// One warp's rendezvous: a barrier and what each lane hands over, in two
// sets used alternately (a lane can only write a set again after the next
// rendezvous, which every lane reaches after reading it).
struct emu_warp {
    emu_barrier bar{32};
    const void *addr[2][32];
    uint32_t val[2][32][8];
};
inline unsigned emu_round; // which set the running lane uses next

struct emu_block {
    std::unique_ptr<emu_barrier> bar;
    std::vector<std::unique_ptr<emu_warp>> warps;
};

inline emu_block *emu_cur;

inline emu_warp &emu_my_warp() { return *emu_cur->warps[threadIdx.x / 32]; }
inline unsigned emu_lane() { return threadIdx.x & 31; }

inline void __syncthreads() { emu_cur->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_my_warp().bar.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int mask) {
    emu_warp &w = emu_my_warp();
    const unsigned l = emu_lane(), k = emu_round++ & 1;
    memcpy(&w.val[k][l][0], &v, 4);
    w.bar.arrive_and_wait();
    float r;
    memcpy(&r, &w.val[k][l ^ (unsigned)mask][0], 4);
    return r;
}

template <typename T> inline T __ldg(const T *p) { return *p; }
// The rounded operations (no fused multiply-add): one IEEE operation each,
// as the host's SSE arithmetic is.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

inline int emu_cp_deferred;

struct emu_copy {
    void *dst;
    const void *src;
    int bytes;
    bool valid;
};
inline std::vector<emu_copy> *emu_pending; // the running fiber's

inline void emu_do_copy(const emu_copy &c) {
    if (c.valid)
        memcpy(c.dst, c.src, (size_t)c.bytes);
    else
        memset(c.dst, 0, (size_t)c.bytes);
}

namespace qac_fa {

inline void emu_cp(void *dst, const void *src, int bytes, bool valid) {
    const emu_copy c = {dst, src, bytes, valid};
    if (emu_cp_deferred)
        emu_pending->push_back(c);
    else
        emu_do_copy(c);
}
inline void emu_cp_wait() {
    for (const emu_copy &c : *emu_pending) emu_do_copy(c);
    emu_pending->clear();
}

// ldmatrix .x4: lane l receives, of matrix i (rows given by lanes 8i..8i+7),
// row l/4, elements 2(l%4) and 2(l%4)+1; with .trans the same of the
// transposed matrix, that is rows 2(l%4) and 2(l%4)+1, element l/4.
inline void emu_ldsm4(uint32_t (&r)[4], const void *ptr, bool trans) {
    emu_warp &w = emu_my_warp();
    const unsigned l = emu_lane(), k = emu_round++ & 1;
    w.addr[k][l] = ptr;
    w.bar.arrive_and_wait();
    for (int i = 0; i < 4; i++) {
        uint16_t lo, hi;
        if (!trans) {
            const char *row = (const char *)w.addr[k][8 * i + l / 4];
            memcpy(&lo, row + (l % 4) * 4, 2);
            memcpy(&hi, row + (l % 4) * 4 + 2, 2);
        } else {
            memcpy(&lo, (const char *)w.addr[k][8 * i + 2 * (l % 4)] + (l / 4) * 2, 2);
            memcpy(&hi, (const char *)w.addr[k][8 * i + 2 * (l % 4) + 1] + (l / 4) * 2, 2);
        }
        r[i] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

template <typename E> inline float emu_half_to_float(uint16_t bits) {
    E v;
    memcpy((void *)&v, &bits, 2);
    return qac_to_float<E>(v);
}

// mma.m16n8k16, row.col, fp32 accumulators: lane 4g + i holds a0 = A[g][2i..],
// a1 = A[g+8][2i..], a2 = A[g][8+2i..], a3 = A[g+8][8+2i..]; b0 = B[2i..][g],
// b1 = B[8+2i..][g]; c0, c1 = C[g][2i, 2i+1], c2, c3 = C[g+8][2i, 2i+1].
template <typename E> void emu_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu_warp &w = emu_my_warp();
    const unsigned l = emu_lane(), set = emu_round++ & 1;
    for (int i = 0; i < 4; i++) w.val[set][l][i] = a[i];
    w.val[set][l][4] = b0;
    w.val[set][l][5] = b1;
    w.bar.arrive_and_wait();
    auto A = [&](int row, int k) {
        const int lane = 4 * (row % 8) + (k % 8) / 2, reg = (row >= 8) + 2 * (k >= 8);
        return emu_half_to_float<E>((uint16_t)(w.val[set][lane][reg] >> (16 * (k % 2))));
    };
    auto B = [&](int k, int n) {
        const int lane = 4 * n + (k % 8) / 2, reg = 4 + (k >= 8);
        return emu_half_to_float<E>((uint16_t)(w.val[set][lane][reg] >> (16 * (k % 2))));
    };
    const int g = (int)l / 4, i = (int)l % 4;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >= 2), col = 2 * i + (e & 1);
        float s = c[e];
        for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
        c[e] = s;
    }
}

} // namespace qac_fa

// The fibers of the running block and the scheduler's context.
struct emu_fiber {
    ucontext_t ctx; // the first entry (makecontext's fresh stack)
    void *jb[5];    // every later switch: __builtin_setjmp/longjmp, which,
                    // unlike swapcontext, make no sigprocmask system call
    std::unique_ptr<char[]> stack;
    unsigned tid, round;
    bool started;
    std::vector<emu_copy> pending;
    bool done;
};
inline void *emu_sched_jb[5];
inline emu_fiber *emu_self;
inline void (*emu_body)(void *);
inline void *emu_body_arg;

// __builtin_longjmp may not share a function with its __builtin_setjmp.
__attribute__((noinline)) inline void emu_jump(void **jb) { __builtin_longjmp(jb, 1); }

__attribute__((noinline)) inline void emu_yield() {
    emu_self->round = emu_round;
    if (__builtin_setjmp(emu_self->jb) == 0) emu_jump(emu_sched_jb);
}

inline void emu_fiber_main() {
    emu_body(emu_body_arg);
    emu_cur->warps[emu_self->tid / 32]->bar.arrive_and_drop(); // an exited thread holds up no barrier
    emu_cur->bar->arrive_and_drop();
    emu_self->done = true;
    emu_jump(emu_sched_jb); // the fiber never returns (uc_link is unused)
}

// Switch from the scheduler into fiber f until it yields or ends.
__attribute__((noinline)) inline void emu_enter(emu_fiber *f) {
    if (__builtin_setjmp(emu_sched_jb) == 0) {
        if (!f->started) {
            f->started = true;
            setcontext(&f->ctx);
        }
        emu_jump(f->jb);
    }
}

// Start a block's fibers and run them round robin until every one has
// finished. Its counters are globals: nothing automatic lives across
// the fibers' switches.
inline unsigned emu_t, emu_left;
// Shared memory to fill with NaN bits before every block (a read of what
// no thread wrote shows), when the includer sets it.
inline unsigned char *emu_smem;
inline size_t emu_smem_bytes;
inline ucontext_t emu_ctx_tmpl;
__attribute__((noinline)) inline void emu_run_block(emu_fiber *fib, unsigned threads, size_t stack) {
    for (emu_t = 0; emu_t < threads; emu_t++) {
        emu_fiber &f = fib[emu_t];
        f.tid = emu_t, f.round = 0, f.done = false, f.started = false;
        f.pending.clear();
        f.ctx = emu_ctx_tmpl; // one getcontext per launch: each is a system call
        f.ctx.uc_stack.ss_sp = f.stack.get();
        f.ctx.uc_stack.ss_size = stack;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, emu_fiber_main, 0);
    }
    for (emu_left = threads; emu_left;) {
        emu_left = 0;
        for (emu_t = 0; emu_t < threads; emu_t++) {
            emu_fiber &f = fib[emu_t];
            if (f.done) continue;
            emu_self = &f;
            threadIdx = {emu_t, 0, 0};
            emu_round = f.round;
            emu_pending = &f.pending;
            emu_enter(&f);
            emu_left += !fib[emu_t].done;
        }
    }
}

// When set, only the blocks it accepts run (a test of a huge grid runs the
// few blocks whose output it checks).
inline std::function<bool(emu_dim)> emu_block_filter;

// Run kernel() over a grid of blocks of `threads` threads, dynamic shared
// memory in the kernels' fa_smem (the blocks run one at a time). A grid or
// block that a GPU refuses (cudaErrorInvalidConfiguration) stops the test:
// gridDim.x up to 2^31 - 1, .y and .z up to 65,535, 1 to 1,024 threads.
template <typename F> void emu_launch(emu_dim grid, unsigned threads, F kernel) {
    constexpr size_t STACK = 256 << 10;
    if (grid.x < 1 || grid.x > 0x7fffffffu || grid.y < 1 || grid.y > 65535 || grid.z < 1 || grid.z > 65535 ||
        threads < 1 || threads > 1024) {
        fprintf(stderr, "FAIL emu_launch: grid %u x %u x %u of %u threads: a GPU refuses this launch\n", grid.x,
                grid.y, grid.z, threads);
        abort();
    }
    gridDim = grid;
    blockDim = {threads, 1, 1};
    // The fibers and their stacks are kept across launches (one pool per OS
    // thread, grown to the widest block, freed at exit): a fresh 256 KB stack
    // per thread per launch cost more system time than the kernels' work.
    thread_local std::vector<emu_fiber> fib;
    if (fib.size() < threads) fib.resize(threads);
    for (unsigned t = 0; t < threads; t++)
        if (!fib[t].stack) fib[t].stack.reset(new char[STACK]);
    getcontext(&emu_ctx_tmpl);
    emu_body = [](void *k) { (*(F *)k)(); };
    emu_body_arg = &kernel;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                if (emu_block_filter && !emu_block_filter({x, y, z})) continue;
                emu_block blk;
                blk.bar = std::make_unique<emu_barrier>((long)threads);
                for (unsigned wi = 0; wi < (threads + 31) / 32; wi++) blk.warps.push_back(std::make_unique<emu_warp>());
                emu_cur = &blk;
                blockIdx = {x, y, z};
                if (emu_smem) memset(emu_smem, 0xff, emu_smem_bytes);
                emu_run_block(fib.data(), threads, STACK);
            }
    emu_body_arg = nullptr; // kernel's address, used by the fibers above only: it does not outlive the launch
}

#endif
