"""A GPU's NVLink fabric as NVML reports it: state, status, cluster and clique, the health
mask decoded condition by condition, and the health summary.

The newest structure the driver has is asked for first: nvmlDeviceGetGpuFabricInfo_v4
(the typed clique list, R610 on), then nvmlDeviceGetGpuFabricInfoV with the v3 structure
(the health summary, R570 on) or, where the driver refuses v3, v2 (the health mask, R535
on; gpudiag.nvml retries it), then nvmlDeviceGetGpuFabricInfo (state, status, cluster and
clique only). What an older structure lacks is an `unsupported` reading saying which
structure the driver answered, never a guess.

The health mask (nvml.h, NVML_GPU_FABRIC_HEALTH_MASK_*): four 2-bit conditions (0 not
supported, 1 true, 2 false) at shifts 0, 2, 4 and 6, and at shift 8 a 4-bit reason the
configuration is incorrect (0 not supported, 1 none, 2 and up a reason). A mask of 0xaa
(NCCL issue 2186's) is all four conditions false: a healthy GPU.

Never run on a GPU with an NVLink fabric in this project: tested through the C NVML
stand-in's v2/v3/v4 structures only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol

from gpudiag import catalog
from gpudiag.model import Reading, ReadingStatus
from gpudiag.nvml import NVML_ERROR_NAMES


class GpuCalls(Protocol):
    """What the GPU probe's per-GPU calls give (probes/gpu.py's GpuCalls)."""

    index: int

    def call_or_none(self, function: str, *args: int) -> Any: ...

    def reading(
        self, suffix: str, function: str, *args: int, convert: Callable[[Any], Any] | None = None
    ) -> Reading: ...


FABRIC_STATES = {0: "not-supported", 1: "not-started", 2: "in-progress", 3: "completed"}
# nvml.h's 2-bit health conditions by shift: NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*
HEALTH_CONDITIONS = {
    0: "degraded-bandwidth",
    2: "route-recovery",
    4: "route-unhealthy",
    6: "access-timeout-recovery",
}
INCORRECT_CONFIGURATION_SHIFT = 8  # NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
INCORRECT_CONFIGURATION_WIDTH = 0xF
# NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* (0 not supported, 1 none)
INCORRECT_CONFIGURATIONS = {
    2: "incorrect-sysguid",
    3: "incorrect-chassis-serial",
    4: "no-partition",
    5: "insufficient-nvlinks",
    6: "incompatible-gpu-firmware",
    7: "invalid-location",
    8: "gpu-state-invalid",
}
CONFIG_FLAG = "incorrect-configuration:"  # the flag's prefix: incorrect-configuration:<reason>
# NVML_GPU_FABRIC_HEALTH_SUMMARY_*
HEALTH_SUMMARIES = {0: "not-supported", 1: "healthy", 2: "unhealthy", 3: "limited-capacity"}
# NVML_GPU_FABRIC_CLIQUE_TYPE_* (as CUDA's CUcliqueType)
CLIQUE_TYPES = {
    0: "unicast-pointer",
    1: "multicast-pointer",
    2: "unicast-logical-endpoint",
    3: "multicast-logical-endpoint",
}
# nvml.h (NVML API 13; NVIDIA/go-nvml gen/nvml/nvml.h at 2f9e261): the field
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, "GPU Recovery action - None/Reset/Reboot/Drain P2P/
# Drain and Reset" (R570 on; it replaces the deprecated NVML_FI_DEV_RESET_STATUS, 226, and
# NVML_FI_DEV_DRAIN_AND_RESET_STATUS, 227), an unsigned int of nvmlDeviceGpuRecoveryAction_t
FIELD_GPU_RECOVERY_ACTION = 230
RECOVERY_ACTIONS = {
    0: "none",  # NVML_GPU_RECOVERY_ACTION_NONE: no action needed
    1: "gpu-reset",  # NVML_GPU_RECOVERY_ACTION_GPU_RESET: reset the GPU
    2: "node-reboot",  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: reboot the node
    3: "drain-p2p",  # NVML_GPU_RECOVERY_ACTION_DRAIN_P2P
    4: "drain-and-reset",  # NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET: drain P2P, reset
    5: "recover-imex-domain",  # NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN
    # newer than that nvml.h: nvidia-ml-py 13.615.71's pynvml names them
    6: "bus-reset",  # NVML_GPU_RECOVERY_ACTION_BUS_RESET
    7: "system-reboot",  # NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT
}
V4 = "nvmlDeviceGetGpuFabricInfo_v4"
V = "nvmlDeviceGetGpuFabricInfoV"
V1 = "nvmlDeviceGetGpuFabricInfo"


def health_flags(mask: int) -> list[str]:
    """The health conditions NVML's mask says are true, then the configuration reason."""
    mask = int(mask)
    flags = [name for shift, name in HEALTH_CONDITIONS.items() if (mask >> shift) & 3 == 1]
    reason = (mask >> INCORRECT_CONFIGURATION_SHIFT) & INCORRECT_CONFIGURATION_WIDTH
    if reason >= 2:
        flags.append(CONFIG_FLAG + INCORRECT_CONFIGURATIONS.get(reason, f"reason-{reason}"))
    return flags


def fabric_status(info: dict[str, Any]) -> str:
    """The fabric's error status: 'ok', or NVML's name for the return code."""
    code = int(info["status"])
    return "ok" if code == 0 else NVML_ERROR_NAMES.get(code, f"Error{code}")


def cluster_uuid(info: dict[str, Any]) -> str:
    """The 16 bytes of clusterUuid as a UUID string (all zero: on no cluster)."""
    text = bytes(int(b) & 0xFF for b in info["clusterUuid"]).hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def cliques(info: dict[str, Any]) -> list[str]:
    """v4's typed cliques: 'unicast-pointer:0x7ffd', in the driver's order."""
    return [
        f"{CLIQUE_TYPES.get(int(c['type']), 'type-' + str(c['type']))}:0x{int(c['id']):x}"
        for c in info["cliques"]
    ]


def clique_id(info: dict[str, Any]) -> int:
    """cliqueId; in v4 the id of the first unicast-pointer clique (nvml.h: the legacy
    cliqueId maps to it)."""
    if "cliqueId" in info:
        return int(info["cliqueId"])
    for clique in info["cliques"]:
        if int(clique["type"]) == 0:
            return int(clique["id"])
    raise ValueError("no unicast-pointer clique in the list")


def _is_absent(reading: Reading) -> bool:
    return not reading.ok and (
        "FunctionNotFound" in reading.reason or "NotRecorded" in reading.reason
    )


def gpu_fabric(gpu: GpuCalls, declared_as: Callable[[str], catalog.Declared]) -> Iterator[Reading]:
    """Every fabric reading of one GPU, from the newest structure the driver answers."""
    state = None
    function = V1
    for function in (V4, V, V1):
        convert: Callable[[Any], Any] = lambda f: FABRIC_STATES[f["state"]]  # noqa: E731
        state = gpu.reading("fabric.state", function, convert=convert)
        if not _is_absent(state):
            break
    assert state is not None
    yield state
    info = gpu.call_or_none(function)
    version = (
        "v4"
        if function == V4
        else "v1"
        if function == V1
        else "v3"
        if info is not None and "healthSummary" in info
        else "v2"
    )
    source = f"nvml:{function}"

    def unsupported(suffix: str, reason: str) -> Reading:
        return declared_as(f"gpu.{{gpu}}.fabric.{suffix}").failed(
            ReadingStatus.UNSUPPORTED, reason, source, gpu=gpu.index
        )

    def failed_like_state(suffix: str) -> Reading:
        return declared_as(f"gpu.{{gpu}}.fabric.{suffix}").failed(
            state.status, state.reason, state.source, gpu=gpu.index
        )

    none = "the GPU has no NVLink fabric (fabric state not-supported)"
    if state.ok and state.value == "completed":  # nvml.h: status is valid once completed
        yield gpu.reading("fabric.status", function, convert=fabric_status)
    elif state.ok and state.value == "not-supported":
        yield unsupported("status", none)
    elif state.ok:  # NVL008 reports the state; the status comes once registration completes
        reason = f"fabric registration has not completed (state {state.value})"
        yield declared_as("gpu.{gpu}.fabric.status").failed(
            ReadingStatus.MISSING, reason, source, gpu=gpu.index
        )
    else:
        yield failed_like_state("status")
    on_fabric = state.ok and state.value != "not-supported"
    for suffix, convert in (("cluster_uuid", cluster_uuid), ("clique_id", clique_id)):
        if on_fabric:
            yield gpu.reading(f"fabric.{suffix}", function, convert=convert)
        else:
            yield unsupported(suffix, none) if state.ok else failed_like_state(suffix)
    if version == "v4" and on_fabric:
        yield gpu.reading("fabric.cliques", function, convert=cliques)
    elif on_fabric:
        yield unsupported(
            "cliques", f"the driver answers nvmlGpuFabricInfo_{version}: no typed cliques"
        )
    else:
        yield unsupported("cliques", none) if state.ok else failed_like_state("cliques")
    if version == "v1":  # the oldest structure has no health mask: those rules cannot apply
        reason = "driver lacks nvmlDeviceGetGpuFabricInfoV (R535 and older): no fabric health mask"
        yield unsupported("health_flags", reason)
    else:
        yield gpu.reading(
            "fabric.health_flags", function, convert=lambda f: health_flags(f["healthMask"])
        )
    if version in ("v1", "v2"):
        reason = f"the driver answers nvmlGpuFabricInfo_{version}: no health summary (R570 on)"
        yield unsupported("health_summary", reason)
    elif info is not None and int(info["healthSummary"]) == 0:
        yield unsupported("health_summary", "NVML: health summary not supported on this GPU")
    else:
        yield gpu.reading(
            "fabric.health_summary",
            function,
            convert=lambda f: HEALTH_SUMMARIES.get(
                int(f["healthSummary"]), str(f["healthSummary"])
            ),
        )
    yield gpu_c2c(gpu)
    yield gpu_recovery_action(gpu)


def recovery_action(value: Any) -> str:
    """nvmlDeviceGpuRecoveryAction_t by name: 'none', 'gpu-reset', ...; 'action-N' for a
    value newer than gpudiag knows."""
    return RECOVERY_ACTIONS.get(int(value), f"action-{int(value)}")


def gpu_recovery_action(gpu: GpuCalls) -> Reading:
    """What the driver says the GPU needs to recover (FAB013-FAB015): the field
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION. NotSupported on a driver without it (older than
    R570); a recording made before gpudiag read it holds none, which is said, not guessed."""
    reading = gpu.reading(
        "recovery_action",
        "nvmlDeviceGetFieldValues",
        FIELD_GPU_RECOVERY_ACTION,
        0,
        convert=recovery_action,
    )
    if not reading.ok and "NotRecorded" in reading.reason:
        why = (
            "the recording holds no GPU recovery action (made before gpudiag read "
            "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"
        )
        return replace(reading, status=ReadingStatus.UNSUPPORTED, reason=why)
    return reading


def gpu_c2c(gpu: GpuCalls) -> Reading:
    """Whether the GPU reaches its CPU over NVLink-C2C (a Grace superchip) rather than
    PCIe: nvmlDeviceGetC2cModeInfoV (NotSupported on a GPU without C2C)."""
    return gpu.reading(
        "c2c.enabled", "nvmlDeviceGetC2cModeInfoV", convert=lambda c: bool(c["isC2cEnabled"])
    )


# the readings gpu_fabric makes (declared by the gpu probe, which runs it)
FABRIC_READINGS = (
    catalog.config("gpu.{gpu}.fabric.state"),
    catalog.config("gpu.{gpu}.fabric.status"),
    catalog.config("gpu.{gpu}.fabric.health_flags"),
    catalog.config(
        "gpu.{gpu}.fabric.cluster_uuid", help="the NVLink domain (an NVL72 rack) the GPU is in"
    ),
    catalog.config("gpu.{gpu}.fabric.clique_id", help="the fabric clique the GPU is in"),
    catalog.config("gpu.{gpu}.fabric.cliques", help="v4's typed cliques, type:id"),
    catalog.config("gpu.{gpu}.fabric.health_summary"),
    catalog.config("gpu.{gpu}.c2c.enabled", help="NVLink-C2C (Grace) instead of PCIe to the CPU"),
    catalog.volatile(
        "gpu.{gpu}.recovery_action",
        help="what the driver says the GPU needs: none, gpu-reset, node-reboot, drain-p2p, ...",
    ),
)
