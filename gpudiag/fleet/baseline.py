"""`gpudiag baseline PATH... -o FILE.toml`: a site rules file from a fleet known to be good.

The latest snapshot of every node, grouped by node type: what makes nodes comparable,
the GPU model (the most common PCI device id) and count, virtual machine or bare metal
(host.virt.vm), and with `by_driver` the NVIDIA driver (a site that runs one driver per
group; by default the driver is a rule like any other, so one driver for the fleet).
Each group gets its own rules, each with `gpu_models` (the model) and an `applies_if` on
nvml.gpu_count and host.virt.vm (and the driver), so that twelve VMs among 585 HGX nodes
make their own group instead of dropping every rule they differ on:

- configuration: every configuration reading (declared in gpudiag/catalog.py) that was
  read and has one value on every node and every instance (each GPU, NVLink, GPU pair,
  PCIe device, NUMA node) becomes a rule expecting that value (`equal`; a list reading
  `subset_of` its items, or `empty`); a reading with one value per instance but not the
  same on every instance (a positional reading, catalog.Kind.POSITIONAL: a GPU's NUMA
  node or CPU affinity; a NUMA node's CPUs; a PCIe device's class) becomes one rule per
  instance (a swapped NUMA layout breaks them);
- metrics: every kernel figure that is better higher gets a lower bound per GPU, the
  group's `quantile` of it less `margin`; and the node's median of its GPUs
  (node.kernel.gpus_median.METRIC, gpudiag/derive.py) gets a floor from the spread of the
  node aggregates: FLOOR_SPREADS robust standard deviations below their median, never
  more than the fleet's slow threshold (whyslow.DEFAULT_SLOW_PCT) below it, so that a
  node 8% slower on every GPU is caught at a 2.5% GPU-to-GPU spread (its median of 8 GPUs
  spreads about 1.05%: the floor is about 4.2% down) as at the 2% node-to-node spread of
  real fleets (7% down);
- nothing is dropped silently: every reading left out is listed at the end of the file,
  with its group and why (values that differ, not read or absent on some nodes, a value
  a rule cannot state).

The file passes `gpudiag rules lint`; placed in a directory given to `--rules`, a node like
the fleet gets no new finding, and `gpudiag --rules DIR fleet` judges every node with it.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import tomli_w

from gpudiag import __version__, catalog
from gpudiag.atomic import write_atomic
from gpudiag.derive import NODE_MEDIAN
from gpudiag.diff import higher_is_better
from gpudiag.fleet.outliers import MAD_SCALE
from gpudiag.fleet.records import LoadedFleet
from gpudiag.fleet.table import DEVICE_ID, MIN_COMPARABLE, Fleet, fold
from gpudiag.fleet.whyslow import DEFAULT_SLOW_PCT
from gpudiag.hostfs import natural_key

_TEXT = re.compile(r"^[\x20-\x7e]*$")


def rule_template(key: str) -> tuple[str, str]:
    """(scope, reading template) of a key: gpu.3.power.limit -> (gpu, gpu.{gpu}.power.limit)."""
    return catalog.template_of(key)


def _ids() -> Iterator[str]:
    """BASE001 ... BASE999, BASEA001, ... (ids are 2-8 letters and 3 digits)."""
    for prefix in ("BASE", *(f"BASE{c}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")):
        for number in range(1, 1000):
            yield f"{prefix}{number:03d}"


def _expectation(value: Any) -> dict[str, Any] | None:
    """The expectation for one value, or None where a rule cannot state it safely."""
    if isinstance(value, tuple):
        if not value:
            return {"empty": True}
        if all(isinstance(v, (str, int, float)) for v in value):
            if any(isinstance(v, str) and ("__" in v or not _TEXT.match(v)) for v in value):
                return None
            return {"subset_of": list(value)}
        return None
    if isinstance(value, str) and ("__" in value or not _TEXT.match(value)):
        return None  # rule files refuse '__' (they are data, not code)
    return {"equal": value}


# a healthy node aggregate below it: about once in 30,000 were they normal; measured, 1 of
# 3,000 healthy nodes (6 draws of 500 at a 2.5% GPU-to-GPU spread; 3.5 spreads: 3 of 3,000)
FLOOR_SPREADS = 4.0


@dataclass(frozen=True, order=True)
class NodeType:
    """What makes nodes comparable: GPU model (PCI device id) and count, the
    virtualisation (host.virt.vm: 'none' on bare metal; '' where not read), and the
    driver where the site wants one per group ('' otherwise)."""

    model: str
    gpus: int
    virtual: str
    driver: str = ""

    @property
    def label(self) -> str:
        """0x2330 x8, bare metal (driver 590.48.01)."""
        where = (
            "bare metal"
            if self.virtual == "none"
            else f"virtual ({self.virtual})"
            if self.virtual
            else "virtualisation not read"
        )
        driver = f", driver {self.driver}" if self.driver else ""
        return f"{self.model} x{self.gpus}, {where}{driver}"

    def applies_if(self) -> list[dict[str, Any]]:
        """The rules' applies_if for nodes of this type (besides gpu_models)."""
        out: list[dict[str, Any]] = [{"reading": "nvml.gpu_count", "equal": self.gpus}]
        if self.virtual:
            out.append({"reading": "host.virt.vm", "equal": self.virtual})
        if self.driver:
            out.append({"reading": "nvml.driver_version", "equal": self.driver})
        return out


@dataclass
class Baseline:
    """The rules file's text, how many rules, the groups (type, nodes) and what was
    left out: (group label, reading template, why)."""

    text: str
    count: int
    groups: list[tuple[NodeType, list[str]]] = field(default_factory=list)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)


def _value(fleet: Fleet, config: int, key: str) -> Any:
    found = fleet.config_value(config, key)
    return found[0] if found is not None and found[2] == "ok" else None


def node_type(fleet: Fleet, index: int, by_driver: bool = False) -> NodeType | None:
    """The type of node `index` of fleet.current; None for a node without GPUs."""
    run = fleet.current[index]
    layout = fleet.loaded.layouts[run.layout]
    ids = []
    for key in layout.keys:
        if DEVICE_ID.match(key) and (value := _value(fleet, run.config, key)) is not None:
            ids.append(str(value))
    if not ids:
        return None
    count = _value(fleet, run.config, "nvml.gpu_count")
    if not isinstance(count, int) or isinstance(count, bool):
        count = len(catalog.gpu_indices(layout.keys))
    virtual = _value(fleet, run.config, "host.virt.vm")
    driver = _value(fleet, run.config, "nvml.driver_version") if by_driver else None
    return NodeType(
        Counter(ids).most_common(1)[0][0],
        count,
        str(virtual) if virtual is not None else "",
        str(driver) if driver is not None else "",
    )


def baseline(
    loaded: LoadedFleet,
    quantile: float = 0.01,
    margin: float = 0.05,
    by_driver: bool = False,
    slow_pct: float = DEFAULT_SLOW_PCT,
) -> Baseline:
    """The baseline of a known-good fleet: one set of rules per node type."""
    fleet = Fleet(loaded)
    by_type: dict[NodeType, list[int]] = defaultdict(list)
    for i in range(len(fleet.current)):
        found = node_type(fleet, i, by_driver)
        if found is not None:
            by_type[found].append(i)
    ids = _ids()
    rules: list[dict[str, Any]] = []
    out = Baseline("", 0)
    for kind, members in sorted(by_type.items()):
        hosts = [fleet.current[i].host for i in members]
        out.groups.append((kind, hosts))
        group_rules = _config_rules(fleet, members, kind, len(hosts), out.left_out)
        group_rules += _metric_rules(fleet, members, kind, quantile, margin, slow_pct)
        for rule in group_rules:
            rule["gpu_models"] = [kind.model]
            rule["applies_if"] = kind.applies_if()
        rules.extend(group_rules)
    for rule in rules:
        rule["id"] = next(ids)
    groups = "".join(
        f"#   {kind.label}: {len(hosts)} nodes ({_comment(fold(hosts))})\n"
        for kind, hosts in out.groups
    )
    header = (
        f"# Site baseline written by gpudiag {__version__} `gpudiag baseline` from "
        f"{len(fleet.current)} nodes' latest snapshots.\n"
        "# Put this file in a directory given to --rules (or /etc/gpudiag/rules.d).\n"
        "# One set of rules per node type (GPU model and count, virtual or bare metal),\n"
        "# each applying to its type only (gpu_models and applies_if):\n" + groups + "\n"
    )
    ordered = [{"id": r.pop("id"), **r} for r in rules]
    trailer = ""
    if out.left_out:
        trailer = (
            f"\n# Left out ({len(out.left_out)} readings): no rule states them, and why.\n"
            + "".join(
                f"#   {_comment(label)}: {_comment(template)}: {_comment(why)}\n"
                for label, template, why in out.left_out
            )
        )
    out.text = header + tomli_w.dumps({"rule": ordered}) + trailer
    out.count = len(ordered)
    return out


def baseline_rules(
    loaded: LoadedFleet, quantile: float = 0.01, margin: float = 0.05
) -> tuple[str, int]:
    """The rules file's text and how many rules it holds."""
    found = baseline(loaded, quantile, margin)
    return found.text, found.count


def _comment(text: str) -> str:
    """Text for one comment line: printable ASCII, cut at 200 characters."""
    shown = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return shown if len(shown) <= 200 else shown[:197] + "..."


def _shown(value: Any) -> str:
    shown = ", ".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return shown if shown else "(empty)"


def _config_rules(
    fleet: Fleet,
    members: list[int],
    kind: NodeType,
    node_count: int,
    left_out: list[tuple[str, str, str]],
) -> list[dict[str, Any]]:
    """One rule per configuration reading template with one value everywhere (per
    position for positional readings); what is left out, with why, in `left_out`."""
    configs = Counter(fleet.current[i].config for i in members)
    values: dict[tuple[str, str], Counter[Any]] = defaultdict(Counter)  # value -> nodes
    per_key: dict[tuple[str, str], dict[str, set[Any]]] = defaultdict(lambda: defaultdict(set))
    everywhere: Counter[tuple[str, str]] = Counter()  # on how many nodes
    for config, nodes in configs.items():
        layout = fleet.loaded.layouts[fleet.loaded.config_layout[config]]
        tuple_ = fleet.loaded.configs[config]
        here: dict[tuple[str, str], set[Any]] = defaultdict(set)
        for slot, position in enumerate(layout.config):
            key = layout.keys[position]
            scope_template = rule_template(key)
            found = (
                (tuple_[slot], layout.units[position])
                if layout.statuses[position] == "ok"
                else ("[not read]",)
            )
            here[scope_template].add(found)
            per_key[scope_template][key].add(found)
        for scope_template, found_here in here.items():
            everywhere[scope_template] += nodes
            for value in found_here:
                values[scope_template][value] += nodes
    rules = []
    for (scope, template), found in sorted(values.items(), key=lambda i: natural_key(i[0][1])):
        why = ""
        if ("[not read]",) in found:
            why = f"not read on {found[('[not read]',)]} of {node_count} nodes"
        elif everywhere[(scope, template)] != node_count:
            why = f"absent on {node_count - everywhere[(scope, template)]} of {node_count} nodes"
        elif len(found) != 1:
            keys = per_key[(scope, template)]
            if all(len(v) == 1 for v in keys.values()):  # one value per position
                for key in sorted(keys, key=natural_key):
                    ((value, unit),) = keys[key]
                    rule = _equal_rule("node", key, value, unit, kind, node_count)
                    if rule is not None:
                        rules.append(rule)
                continue
            common = ", ".join(
                f"{_shown(v[0])} x{n}" for v, n in found.most_common(3) if v != ("[not read]",)
            )
            why = f"differs: {len(found)} values ({common}{', ...' if len(found) > 3 else ''})"
        if why:
            left_out.append((kind.label, template, why))
            continue
        ((value, unit),) = found
        rule = _equal_rule(scope, template, value, unit, kind, node_count)
        if rule is None:
            left_out.append((kind.label, template, "a value a rule cannot state"))
            continue
        rules.append(rule)
    return rules


def _equal_rule(
    scope: str, template: str, value: Any, unit: str, kind: NodeType, node_count: int
) -> dict[str, Any] | None:
    """The rule expecting `value` of `template`; None where a rule cannot state it."""
    expect = _expectation(value)
    if expect is None:
        return None
    shown = _shown(value)
    unit_text = f" {unit}" if unit and shown != "(empty)" else ""
    rule: dict[str, Any] = {
        "severity": "warning",
        "title": f"{template} is not the site's {shown}{unit_text}",
        "applies_to": scope,
        "reading": template,
        "expect": expect,
        "why": f"All {node_count} nodes of the known-good fleet ({kind.label}) had "
        f"{shown}{unit_text} here.",
        "fix": "Set it as on the rest of the fleet, or regenerate the baseline with "
        "`gpudiag baseline` if the fleet changed on purpose.",
    }
    if scope not in ("gpu", "node") or (scope == "node" and template != rule_template(template)[1]):
        rule["if_present"] = True
    return rule


def _metric_rules(
    fleet: Fleet,
    members: list[int],
    kind: NodeType,
    quantile: float,
    margin: float,
    slow_pct: float,
) -> list[dict[str, Any]]:
    """A lower bound per kernel figure that is better higher, per GPU; and a floor on
    the node's median of its GPUs, from the spread of those medians."""
    figures: dict[str, list[float]] = defaultdict(list)
    nodes: dict[str, set[str]] = defaultdict(set)
    units: dict[str, str] = {}
    aggregates: dict[str, list[float]] = defaultdict(list)
    for i in members:
        run = fleet.current[i]
        per_node: dict[str, list[float]] = defaultdict(list)
        for kv in run.kernel_values:
            scope_template = rule_template(kv.key)
            if not higher_is_better(kv.unit):
                continue
            figures[scope_template[1]].append(kv.value)
            nodes[scope_template[1]].add(run.host)
            units[scope_template[1]] = kv.unit
            if scope_template[0] == "gpu":
                per_node[scope_template[1]].append(kv.value)
        for template, values in per_node.items():
            if len(values) >= 2:
                aggregates[template].append(statistics.median(values))
    rules = []
    for template in sorted(figures, key=natural_key):
        scope = rule_template(
            template.replace("{gpu}", "0").replace("{peer}", "1").replace("{node}", "0")
        )[0]
        values = np.asarray(figures[template])
        at = float(np.quantile(values, quantile))
        bound = float(f"{at * (1 - margin):.4g}")
        unit = units[template]
        rules.append(
            {
                "severity": "warning",
                "title": f"{template} below the site's {bound:g} {unit}",
                "applies_to": scope,
                "reading": template,
                "expect": {"min": bound},
                "why": f"The {quantile:g} quantile of {len(values)} figures from "
                f"{len(nodes[template])} nodes of the known-good fleet ({kind.label}) was "
                f"{at:.4g} {unit}; the bound is {1 - margin:.0%} of it.",
                "fix": "Find what differs from the fleet: `gpudiag fleet` with this node's "
                "snapshot among the fleet's says which configuration separates slow nodes.",
                **({"if_present": True} if scope not in ("gpu", "node") else {}),
            }
        )
        medians = aggregates.get(template, [])
        if len(medians) >= MIN_COMPARABLE and template.startswith("gpu.{gpu}.kernel."):
            rules.append(_node_floor(template, medians, unit, kind, slow_pct))
    return rules


def _node_floor(
    template: str, medians: list[float], unit: str, kind: NodeType, slow_pct: float
) -> dict[str, Any]:
    """The floor on node.kernel.gpus_median.METRIC from the node aggregates' spread."""
    middle = statistics.median(medians)
    mad = statistics.median(abs(v - middle) for v in medians)
    spread = MAD_SCALE * mad / middle if middle else 0.0
    down = min(FLOOR_SPREADS * spread, slow_pct / 100)
    bound = float(f"{middle * (1 - down):.4g}")
    metric = template.removeprefix("gpu.{gpu}.kernel.")
    reading = f"{NODE_MEDIAN}{metric}"
    return {
        "severity": "warning",
        "title": f"{reading} below the site's {bound:g} {unit}",
        "applies_to": "node",
        "reading": reading,
        "expect": {"min": bound},
        "why": f"The median of the {len(medians)} node medians (each the median of a node's "
        f"GPUs) of the known-good fleet ({kind.label}) was {middle:.4g} {unit}, spreading "
        f"{spread:.1%} (1.4826 MAD); the floor is {down:.1%} below it ({FLOOR_SPREADS:g} "
        f"spreads, at most {slow_pct:g}%): a node slower on every GPU falls under it.",
        "fix": "Compare the node with the fleet (`gpudiag fleet`): a node slow on every GPU "
        "points at what the GPUs share (clocks, cooling, power, the driver, firmware).",
        "if_present": True,
    }


def write_rules(text: str, path: Path) -> None:
    """Write the rules file atomically."""

    def write(stream: IO[str]) -> None:
        stream.write(text)

    write_atomic(path, write)
