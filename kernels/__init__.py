"""GPU and CPU measurement kernels (installed as `gpudiag.kernels`).

So far this holds the statistics every kernel result carries; the kernels themselves
(STREAM, GEMM, burn, host and peer copies) are their own piece of work.
"""
