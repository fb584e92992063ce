"""The CUDA fake runs the kernels' own source (tests/fakekernels.py, tests/cuhost): a
changed burn.cu, stream.cu or copies.cu changes what the fake computes, a kernel that
writes past its array is an illegal address, and a block's threads meet at __syncthreads.
Small grids: each test launches a few thousand threads."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from gpudiag.kernels.device import pinned, to_device, to_host

from fakecuda import CUDARuntimeError


def source(name: str) -> str:
    return (resources.files("gpudiag.kernels") / name).read_text(encoding="utf-8")


def planted(name: str, *bugs: tuple[str, str]) -> str:
    """The kernel source `name` with each (real, bug): `real` replaced by `bug` (found
    once). Bugs in different kernels of one file share a compile."""
    text = source(name)
    for real, bug in bugs:
        assert text.count(real) == 1, real
        text = text.replace(real, bug)
    return text


TAIL = "for (index_t i = vectors * W + start; i < n; i += stride) a[i] = b[i] + scalar * "
COPY = "for (index_t i = start; i < vectors; i += stride) "
TREE = "    if (threadIdx.x < offset) sums[threadIdx.x] += sums[threadIdx.x + offset];\n"
STREAM_BUGS = planted(
    "stream.cu",
    (TAIL + "c[i];", TAIL + "c[i - 1];"),  # the triad's tail reads the element before
    (COPY + "cv[i] = av[i];", COPY + "cv[i + 1] = av[i];"),  # the copy writes one past
    (TREE + "    __syncthreads();", TREE),  # the dot's tree without its barriers
)


def launch(cuda, code: str, kernel: str, grid: int, block: int, args: tuple) -> None:
    cuda.setDevice(0)
    stream = cuda.Stream(non_blocking=True)
    function = cuda.RawModule(code=code, options=("-std=c++17",)).get_function(kernel)
    function((grid,), (block,), args, stream=stream)
    cuda.streamSynchronize(stream.ptr)


def compare_counts(cuda, code: str, differ_at: int, n: int = 4096) -> list[int]:
    """burn_compare_32 of a product that differs from the reference at one element."""
    stream = cuda.Stream(non_blocking=True)
    reference = np.arange(n, dtype=np.uint32)
    product = reference.copy()
    product[differ_at] ^= 1
    p, r = to_device(cuda, product, stream), to_device(cuda, reference, stream)
    counts = to_device(cuda, np.zeros(2, np.uint64), stream)
    args = (np.uint64(p), np.uint64(r), np.uint64(n), np.uint32(0x7F800000),
            np.uint32(0x007FFFFF), np.uint64(counts))  # fmt: skip
    launch(cuda, code, "burn_compare_32", 4, 256, args)
    return to_host(cuda, counts, np.empty(2, np.uint64), stream).tolist()


def test_a_burn_compare_of_half_of_each_product_is_seen(cuda) -> None:
    """Planted in burn.cu: the compare reads only the first half of each product."""
    half = planted("burn.cu", ("i < n; i += stride", "i < n / 2; i += stride"))
    assert compare_counts(cuda, source("burn.cu"), 3000) == [1, 0]
    assert compare_counts(cuda, half, 3000) == [0, 0]  # the difference in the second half
    assert compare_counts(cuda, half, 10) == [1, 0]


def triad(cuda, code: str, n: int = 4101) -> np.ndarray:
    """a = b + 3 c through stream_triad_f64 (n odd: one element in the scalar tail)."""
    stream = cuda.Stream(non_blocking=True)
    a = to_device(cuda, np.zeros(n), stream)
    b = to_device(cuda, np.full(n, 2.0), stream)
    c = to_device(cuda, np.arange(n, dtype=np.float64), stream)
    args = (np.uint64(a), np.uint64(b), np.uint64(c), np.float64(3.0), np.uint64(n))
    launch(cuda, code, "stream_triad_f64", 2, 1024, args)
    return to_host(cuda, a, np.empty(n), stream)


def test_a_stream_kernel_with_a_wrong_index_is_seen(cuda) -> None:
    expected = 2.0 + 3.0 * np.arange(4101)
    assert np.array_equal(triad(cuda, source("stream.cu")), expected)
    wrong = triad(cuda, STREAM_BUGS)
    assert not np.array_equal(wrong, expected)
    assert np.array_equal(wrong[:4100], expected[:4100])  # the vectors right, the tail not


def test_a_kernel_writing_past_its_array_is_an_illegal_address(cuda) -> None:
    stream = cuda.Stream(non_blocking=True)
    a, c = (to_device(cuda, np.ones(4096), stream) for _ in range(2))
    args = (np.uint64(a), np.uint64(c), np.uint64(4096))
    launch(cuda, source("stream.cu"), "stream_copy_f64", 2, 1024, args)
    with pytest.raises(CUDARuntimeError, match="cudaErrorIllegalAddress: a kernel wrote past"):
        launch(cuda, STREAM_BUGS, "stream_copy_f64", 2, 1024, args)


def test_the_dot_products_threads_meet_at_its_barriers(cuda) -> None:
    """stream.cu's dot sums over each block's threads in a tree between __syncthreads:
    run as fibers, every partial sum is its block's; a barrier taken out is seen."""
    n, blocks = 8192, 4  # 2 elements per vector, one vector per thread
    stream = cuda.Stream(non_blocking=True)
    a = to_device(cuda, np.arange(n, dtype=np.float64), stream)
    b = to_device(cuda, np.ones(n), stream)
    partial = to_device(cuda, np.zeros(blocks), stream)
    args = (np.uint64(a), np.uint64(b), np.uint64(partial), np.uint64(n))

    def dot(code: str) -> np.ndarray:
        launch(cuda, code, "stream_dot_f64", blocks, 1024, args)
        return to_host(cuda, partial, np.empty(blocks), stream)

    vectors = np.arange(n, dtype=np.float64).reshape(-1, 2).sum(axis=1)  # thread t: vector t
    assert np.array_equal(dot(source("stream.cu")), vectors.reshape(blocks, -1).sum(axis=1))
    assert not np.array_equal(dot(STREAM_BUGS), vectors.reshape(blocks, -1).sum(axis=1))


def chase(cuda, code: str, steps: int) -> int:
    """peer_latency_chase over a 3-link cycle; the pointer where it ends, as an index."""
    stream = cuda.Stream(non_blocking=True)
    chain = to_device(cuda, np.zeros(3 * 8, np.uint64), stream)
    links = np.zeros(3 * 8, np.uint64)
    links[[0, 8, 16]] = [chain + 64, chain + 128, chain]  # 0 -> 1 -> 2 -> 0
    with pinned(cuda, links):
        cuda.memcpyAsync(
            chain, links.ctypes.data, links.nbytes, cuda.memcpyHostToDevice, stream.ptr
        )
        cuda.streamSynchronize(stream.ptr)
    out = to_device(cuda, np.zeros(1, np.uint64), stream)
    args = (np.uint64(chain), np.uint64(steps), np.uint64(out))
    launch(cuda, code, "peer_latency_chase", 1, 1, args)
    return (int(to_host(cuda, out, np.empty(1, np.uint64), stream)[0]) - chain) // 64


def test_the_pointer_chase_follows_the_chain_it_is_given(cuda) -> None:
    assert [chase(cuda, source("copies.cu"), s) for s in (1, 2, 3, 4)] == [1, 2, 0, 1]
    once = planted("copies.cu", ("i < steps; i++", "i < 1; i++"))
    assert chase(cuda, once, 2) == 1
