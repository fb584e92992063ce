// STREAM kernels (copy, scale, add, triad, dot) for gpudiag, after BabelStream.
// Grid-stride loops over 16-byte vectors (float4, double2: 128-bit loads and stores) in all
// five kernels, each with a scalar tail; tests/test_kernels_stream.py checks the PTX.
// Launched from Python through CuPy's RawModule (gpudiag/kernels/stream.py); the names
// below are what it looks up. Compiled in the tests with nvcc for sm_80, sm_90 and sm_100.

// No headers: CuPy compiles this with NVRTC, which has none of the runtime's.
typedef unsigned long long index_t;

template <typename T> struct Vec;
template <> struct Vec<float> { using type = float4; static constexpr int width = 4; };
template <> struct Vec<double> { using type = double2; static constexpr int width = 2; };

// Element-wise arithmetic on the vector types (float4, double2), lane by lane.
__device__ __forceinline__ float4 vmul(float s, float4 v) {
  return make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
}
__device__ __forceinline__ double2 vmul(double s, double2 v) { return make_double2(s * v.x, s * v.y); }
__device__ __forceinline__ float4 vadd(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ double2 vadd(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float vdot(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ double vdot(double2 a, double2 b) { return a.x * b.x + a.y * b.y; }

// Every kernel: a grid-stride loop over 16-byte vectors (128-bit loads and stores; the
// arrays come from cudaMalloc, so 256-byte aligned), then the scalar tail of n % W elements.
#define GRID_STRIDE_VECTORS                                                                   \
  using V = typename Vec<T>::type;                                                            \
  constexpr int W = Vec<T>::width;                                                            \
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;                        \
  const index_t start = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;          \
  const index_t vectors = n / W;

template <typename T>
__device__ __forceinline__ void copy_body(const T* __restrict__ a, T* __restrict__ c, index_t n) {
  GRID_STRIDE_VECTORS
  const V* av = reinterpret_cast<const V*>(a);
  V* cv = reinterpret_cast<V*>(c);
  for (index_t i = start; i < vectors; i += stride) cv[i] = av[i];
  for (index_t i = vectors * W + start; i < n; i += stride) c[i] = a[i];
}

template <typename T>
__device__ __forceinline__ void scale_body(T* __restrict__ b, const T* __restrict__ c, T scalar,
                                           index_t n) {
  GRID_STRIDE_VECTORS
  V* bv = reinterpret_cast<V*>(b);
  const V* cv = reinterpret_cast<const V*>(c);
  for (index_t i = start; i < vectors; i += stride) bv[i] = vmul(scalar, cv[i]);
  for (index_t i = vectors * W + start; i < n; i += stride) b[i] = scalar * c[i];
}

template <typename T>
__device__ __forceinline__ void add_body(const T* __restrict__ a, const T* __restrict__ b,
                                         T* __restrict__ c, index_t n) {
  GRID_STRIDE_VECTORS
  const V* av = reinterpret_cast<const V*>(a);
  const V* bv = reinterpret_cast<const V*>(b);
  V* cv = reinterpret_cast<V*>(c);
  for (index_t i = start; i < vectors; i += stride) cv[i] = vadd(av[i], bv[i]);
  for (index_t i = vectors * W + start; i < n; i += stride) c[i] = a[i] + b[i];
}

template <typename T>
__device__ __forceinline__ void triad_body(T* __restrict__ a, const T* __restrict__ b,
                                           const T* __restrict__ c, T scalar, index_t n) {
  GRID_STRIDE_VECTORS
  V* av = reinterpret_cast<V*>(a);
  const V* bv = reinterpret_cast<const V*>(b);
  const V* cv = reinterpret_cast<const V*>(c);
  for (index_t i = start; i < vectors; i += stride) av[i] = vadd(bv[i], vmul(scalar, cv[i]));
  for (index_t i = vectors * W + start; i < n; i += stride) a[i] = b[i] + scalar * c[i];
}

// One partial sum per block (blockDim.x must be a power of two, at most 1024); the host
// adds the partial sums after the timed region.
template <typename T>
__device__ __forceinline__ void dot_body(const T* __restrict__ a, const T* __restrict__ b,
                                         T* __restrict__ partial, index_t n) {
  __shared__ T sums[1024];
  GRID_STRIDE_VECTORS
  const V* av = reinterpret_cast<const V*>(a);
  const V* bv = reinterpret_cast<const V*>(b);
  T sum = 0;
  for (index_t i = start; i < vectors; i += stride) sum += vdot(av[i], bv[i]);
  for (index_t i = vectors * W + start; i < n; i += stride) sum += a[i] * b[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned offset = blockDim.x / 2; offset > 0; offset /= 2) {
    if (threadIdx.x < offset) sums[threadIdx.x] += sums[threadIdx.x + offset];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

#define GPUDIAG_STREAM_KERNELS(T, SUFFIX)                                                     \
  extern "C" __global__ void stream_copy_##SUFFIX(const T* a, T* c, index_t n) {              \
    copy_body<T>(a, c, n);                                                                    \
  }                                                                                           \
  extern "C" __global__ void stream_scale_##SUFFIX(T* b, const T* c, T scalar, index_t n) {   \
    scale_body<T>(b, c, scalar, n);                                                           \
  }                                                                                           \
  extern "C" __global__ void stream_add_##SUFFIX(const T* a, const T* b, T* c, index_t n) {   \
    add_body<T>(a, b, c, n);                                                                  \
  }                                                                                           \
  extern "C" __global__ void stream_triad_##SUFFIX(T* a, const T* b, const T* c, T scalar,   \
                                                   index_t n) {                                \
    triad_body<T>(a, b, c, scalar, n);                                                        \
  }                                                                                           \
  extern "C" __global__ void stream_dot_##SUFFIX(const T* a, const T* b, T* partial,         \
                                                 index_t n) {                                  \
    dot_body<T>(a, b, partial, n);                                                            \
  }

GPUDIAG_STREAM_KERNELS(float, f32)
GPUDIAG_STREAM_KERNELS(double, f64)
