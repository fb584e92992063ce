// cuda_host.h: a CUDA kernel source (kernels/*.cu) compiled for the host, for the tests.
// Every launch is a loop over the grid: blocks one after another, and the threads of a
// block either one after another (a kernel without __syncthreads) or as fibers that run
// in turn up to each __syncthreads, so that a block's threads meet at its barriers as on
// a GPU. tests/fakekernels.py generates one launch function per kernel, compiles the
// source with g++ and launches it with ctypes from the CUDA fake (tests/fakecuda.py).
// What the kernels use, mapped: __global__, __device__, __forceinline__, __shared__
// (one copy per block: blocks run one at a time), threadIdx, blockIdx, blockDim,
// gridDim, atomicAdd, float4, double2, make_float4, make_double2, __syncthreads.
#pragma once
#include <csetjmp>
#include <cstddef>
#include <cstdlib>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct gd_dim3 {
  unsigned x, y, z;
};
static gd_dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// One host thread runs a launch: an atomic is a plain read-modify-write.
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  unsigned long long old = *address;
  *address = old + value;
  return old;
}
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  unsigned old = *address;
  *address = old + value;
  return old;
}

namespace gd {
constexpr size_t STACK = 2048;  // per fiber: the kernels' frames are a few hundred bytes
struct Fiber {
  void* sp;
  bool done;
};
static Fiber fibers[1024];
static char* stacks;
static void* scheduler;
static unsigned current;
static bool in_fibers, barrier_seen;
static std::jmp_buf no_barriers;
static void (*body)(void**);  // the kernel's launch function and its arguments
static void** arguments;
}  // namespace gd

#if defined(__x86_64__)
// Save the callee-saved registers on this stack, store its pointer in *from, switch to
// the stack `to` and restore what was saved there (System V AMD64).
extern "C" void gd_switch(void** from, void* to);
asm(R"(
.text
.globl gd_switch
.type gd_switch, @function
gd_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size gd_switch, .-gd_switch
)");
#else
#error "tests/cuhost/cuda_host.h switches fibers on x86-64 only"
#endif

namespace gd {
static unsigned threads;  // of the block running as fibers

// Switch from fiber `from` to the next one that has not finished, in thread order
// (past the last: the first again, the block's next pass), or back to the scheduler
// when every one has finished. Fiber to fiber, without the scheduler in between.
static void next_fiber(unsigned from, void** save) {
  for (unsigned step = 1, t = from; step <= threads; step++) {
    if (++t == threads) t = 0;
    if (fibers[t].done) continue;
    current = t;
    threadIdx = {t, 0, 0};
    gd_switch(save, fibers[t].sp);
    return;
  }
  gd_switch(save, scheduler);
}

[[noreturn]] static void fiber_main() {
  body(arguments);
  fibers[current].done = true;
  void* unused;
  next_fiber(current, &unused);
  std::abort();  // a finished fiber is never resumed
}

// A fresh fiber's stack: six zero registers for gd_switch to pop, then fiber_main as
// its return address, placed so that fiber_main starts as a called function does.
static void* fresh(unsigned thread) {
  char* top = stacks + (thread + 1) * STACK;
  void** sp = reinterpret_cast<void**>(top - 16);
  *sp = reinterpret_cast<void*>(&fiber_main);
  for (int i = 0; i < 6; i++) *--sp = nullptr;
  return sp;
}

// The block's threads as fibers: each runs to its next __syncthreads and hands over to
// the next thread, the last to the first again, until all have finished.
static void block_as_fibers(unsigned count) {
  threads = count;
  for (unsigned t = 0; t < count; t++) fibers[t] = {fresh(t), false};
  current = 0;
  threadIdx = {0, 0, 0};
  gd_switch(&scheduler, fibers[0].sp);
}

// 0: ran; 1: ran, and reached __syncthreads (launch it with fibers from now on);
// -1: reached __syncthreads without fibers (the launch was abandoned there).
static int launch(unsigned grid, unsigned block, int fibers_mode, void (*f)(void**), void** args) {
  if (block == 0 || block > 1024) return -2;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  barrier_seen = false;
  in_fibers = fibers_mode != 0;
  if (in_fibers) {
    if (!stacks) stacks = static_cast<char*>(std::aligned_alloc(64, 1024 * STACK));
    body = f;
    arguments = args;
    for (unsigned b = 0; b < grid; b++) {
      blockIdx = {b, 0, 0};
      block_as_fibers(block);
    }
    return barrier_seen ? 1 : 0;
  }
  if (setjmp(no_barriers)) return -1;
  for (unsigned b = 0; b < grid; b++) {
    blockIdx = {b, 0, 0};
    for (unsigned t = 0; t < block; t++) {
      threadIdx = {t, 0, 0};
      f(args);
    }
  }
  return 0;
}
}  // namespace gd

__attribute__((noinline)) static void __syncthreads() {
  gd::barrier_seen = true;
  if (!gd::in_fibers) std::longjmp(gd::no_barriers, 1);
  unsigned self = gd::current;
  gd::next_fiber(self, &gd::fibers[self].sp);
}
