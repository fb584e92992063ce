"""Firing and quiet readings of the rack-scale fabric rules (rules/fabric.toml), merged
into rule_cases.CASES."""

from __future__ import annotations

from gpudiag.model import Reading

R = Reading


def _gpu(suffix: str, fire: object, quiet: object):
    key = f"gpu.0.{suffix}"
    return ([R(key, fire)], [R(key, quiet)])


def _node(key: str, fire: object, quiet: object):
    return ([R(key, fire)], [R(key, quiet)])


HEALTHY: list[str] = []
FABRIC_CASES: dict[str, tuple[list[Reading], list[Reading]]] = {
    # each condition fires its own rule alone: the quiet side holds the other conditions
    "FAB001": _gpu("fabric.health_flags", ["route-recovery"], ["degraded-bandwidth"]),
    "FAB002": _gpu("fabric.health_flags", ["route-unhealthy"], ["route-recovery"]),
    "FAB003": _gpu("fabric.health_flags", ["access-timeout-recovery"], HEALTHY),
    "FAB004": _gpu(
        "fabric.health_flags",
        ["incorrect-configuration:insufficient-nvlinks"],
        ["access-timeout-recovery"],
    ),
    "FAB005": _gpu("fabric.health_summary", "unhealthy", "healthy"),
    "FAB006": _gpu("fabric.health_summary", "limited-capacity", "healthy"),
    "FAB007": _node("fabric.manager.running", False, True),
    "FAB008": _node("fabric.manager.modules_missing", ["ib_umad"], []),
    "FAB009": _node("imex.running", False, True),
    "FAB010": _node("imex.channels", 0, 1),
    "FAB011": _node("cuda.init", "CUDA_ERROR_SYSTEM_NOT_READY (802)", "ok"),
    # each recovery action fires one rule; the quiet side is another rule's action
    "FAB013": _gpu("recovery_action", "gpu-reset", "none"),
    "FAB014": _gpu("recovery_action", "node-reboot", "drain-p2p"),
    "FAB015": _gpu("recovery_action", "drain-p2p", "gpu-reset"),
    "FAB012": _node(
        "grace.numa_binding", ["GPU 0009:01:00.0 on NUMA node 4, which has no CPUs"], []
    ),
}
