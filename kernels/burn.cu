// The burn's check, after gpu-burn's compare kernel: count the elements of a product that
// differ bit for bit from the reference product, and those that are NaN, on the GPU (the
// products fill most of the GPU's memory; copying them to the host would take longer than
// computing them). Launched from Python through CuPy's RawModule (gpudiag/kernels/burn.py).
// No headers: CuPy compiles this with NVRTC.
typedef unsigned long long index_t;

// counts[0] += differing elements, counts[1] += NaN elements. W is the element's width in
// bits (16: FP16/BF16, 32: FP32, 64: FP64), EXP its exponent mask and MANT its mantissa mask.
template <typename W>
__device__ __forceinline__ void compare_body(const W* __restrict__ product,
                                             const W* __restrict__ reference, index_t n,
                                             W exponent, W mantissa, index_t* counts) {
  index_t differ = 0, nans = 0;
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const W value = product[i];
    differ += value != reference[i];
    nans += (value & exponent) == exponent && (value & mantissa) != 0;
  }
  if (differ) atomicAdd(&counts[0], differ);
  if (nans) atomicAdd(&counts[1], nans);
}

extern "C" __global__ void burn_compare_16(const unsigned short* product,
                                           const unsigned short* reference, index_t n,
                                           unsigned short exponent, unsigned short mantissa,
                                           index_t* counts) {
  compare_body<unsigned short>(product, reference, n, exponent, mantissa, counts);
}

extern "C" __global__ void burn_compare_32(const unsigned int* product,
                                           const unsigned int* reference, index_t n,
                                           unsigned int exponent, unsigned int mantissa,
                                           index_t* counts) {
  compare_body<unsigned int>(product, reference, n, exponent, mantissa, counts);
}

extern "C" __global__ void burn_compare_64(const index_t* product, const index_t* reference,
                                           index_t n, index_t exponent, index_t mantissa,
                                           index_t* counts) {
  compare_body<index_t>(product, reference, n, exponent, mantissa, counts);
}
