"""Which readings describe a node's configuration and which are volatile values.

Configuration readings (driver version, power limit, PCIe width, governor, the GPU-pair
topology) are what makes two nodes "the same"; volatile ones (temperatures, power draw,
idle clocks, serials, error counters, kernel figures) differ between any two healthy
nodes or runs. `gpudiag fleet` groups nodes by their configuration readings and
`gpudiag baseline` writes expected values for them only.

This is the one place that decides it, until a declared catalog of readings replaces it:
it takes the diff's "always-varying readings" (diff.NOISY) and adds the counters and
measurements that differ from node to node without being configuration.
"""

from __future__ import annotations

import re

from gpudiag.diff import NOISY

COUNTERS = re.compile(
    r"(\.errors\.|\.ecc\.(volatile|aggregate)\.|\.retired_pages\.(single_bit|double_bit)$"
    r"|\.remapped_rows\.(correctable|uncorrectable)$|\.replay_counter$|^faults\."
    r"|\.kernel\.|\.copy_(gbs|bidir_gbs|latency_us|share_of_median)$|\.peer_access$"
    r"|\.temperature\.gpu_max$|^mem\.free$)"
)


def is_volatile(key: str) -> bool:
    """A value that differs between healthy nodes or runs (not configuration)."""
    return bool(NOISY.search(key) or COUNTERS.search(key))


def is_configuration(key: str) -> bool:
    """A reading that says how the node is set up (the complement of is_volatile)."""
    return not is_volatile(key)
