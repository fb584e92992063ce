// Peer latency as nvbandwidth measures it: one thread follows a chain of pointers that
// lies in another GPU's memory, each load's address coming from the previous load, so
// that the loads cannot overlap and the time per step is one round trip over the link.
// Launched from Python through CuPy's RawModule (gpudiag/kernels/copies.py).
// No headers: CuPy compiles this with NVRTC.
typedef unsigned long long index_t;

extern "C" __global__ void peer_latency_chase(const index_t* chain, index_t steps,
                                              index_t* out) {
  index_t p = reinterpret_cast<index_t>(chain);
  for (index_t i = 0; i < steps; i++) p = *reinterpret_cast<const volatile index_t*>(p);
  *out = p;  // keeps the chain from being optimised away
}
