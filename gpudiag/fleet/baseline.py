"""`gpudiag baseline PATH... -o FILE.toml`: a site rules file from a fleet known to be good.

For each GPU model in the fleet (by PCI device id), the latest snapshot of every node:

- configuration: every configuration reading (declared in gpudiag/catalog.py) that was read and
  has one value on every node and every instance (each GPU, NVLink, GPU pair, PCIe
  device, NUMA node) becomes a rule expecting that value (`equal`; a list reading
  `subset_of` its items, or `empty`);
- metrics: every kernel figure that is better higher (GB/s, TFLOP/s) gets a lower bound,
  the fleet's `quantile` of it (all nodes and devices) less `margin`; its `why` states the
  quantile, the value and how many nodes and figures it came from.

Every rule carries `gpu_models = ["0x...."]`, a small extension of the rule language (one
optional key, one filter in `evaluate`): the rule applies only to nodes with a GPU of that
model. The alternative, site profiles keyed by PCI device id with `*_profile` rules, was
not taken: profiles hold a closed set of numeric fields (no driver version, governor or
topology, which are strings), a site profile would replace the shipped one for its device
id, and the rule engine has no loader for site profiles; a model condition reaches every
reading and leaves the shipped profiles alone.

The file passes `gpudiag rules lint`; placed in a directory given to `--rules`, a node like
the fleet gets no new finding.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import tomli_w

from gpudiag import __version__, catalog
from gpudiag.atomic import write_atomic
from gpudiag.diff import higher_is_better
from gpudiag.fleet.analysis import DEVICE_ID, Fleet
from gpudiag.fleet.records import LoadedFleet
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


def baseline_rules(
    loaded: LoadedFleet, quantile: float = 0.01, margin: float = 0.05
) -> tuple[str, int]:
    """The rules file's text and how many rules it holds."""
    fleet = Fleet(loaded)
    by_model: dict[str, list[int]] = defaultdict(list)  # device id -> node indices
    for i, run in enumerate(fleet.current):
        ids = []
        layout = loaded.layouts[run.layout]
        for key in layout.keys:
            if DEVICE_ID.match(key):
                found = fleet.config_value(run.config, key)
                if found and found[2] == "ok":
                    ids.append(str(found[0]))
        if ids:
            by_model[Counter(ids).most_common(1)[0][0]].append(i)
    ids = _ids()
    rules: list[dict[str, Any]] = []
    for model, members in sorted(by_model.items()):
        hosts = [fleet.current[i].host for i in members]
        rules.extend(_config_rules(fleet, members, model, len(hosts)))
        rules.extend(_metric_rules(fleet, members, model, quantile, margin))
    for rule in rules:
        rule["id"] = next(ids)
    header = (
        f"# Site baseline written by gpudiag {__version__} `gpudiag baseline` from "
        f"{len(fleet.current)} nodes' latest snapshots.\n"
        "# Put this file in a directory given to --rules (or /etc/gpudiag/rules.d).\n"
        "# Each rule applies to nodes with a GPU of the model in its gpu_models.\n\n"
    )
    ordered = [{"id": r.pop("id"), **r} for r in rules]
    return header + tomli_w.dumps({"rule": ordered}), len(ordered)


def _config_rules(
    fleet: Fleet, members: list[int], model: str, node_count: int
) -> list[dict[str, Any]]:
    """One rule per configuration reading template with one value everywhere."""
    configs = Counter(fleet.current[i].config for i in members)
    values: dict[tuple[str, str], set[Any]] = defaultdict(set)
    everywhere: Counter[tuple[str, str]] = Counter()  # in how many configurations
    for config in configs:
        layout = fleet.loaded.layouts[fleet.loaded.config_layout[config]]
        tuple_ = fleet.loaded.configs[config]
        seen: set[tuple[str, str]] = set()
        for slot, position in enumerate(layout.config):
            key = layout.keys[position]
            scope_template = rule_template(key)
            if layout.statuses[position] != "ok":
                values[scope_template].add(("[not read]",))
                continue
            values[scope_template].add((tuple_[slot], layout.units[position]))
            seen.add(scope_template)
        everywhere.update(seen)
    rules = []
    for (scope, template), found in sorted(values.items(), key=lambda i: natural_key(i[0][1])):
        if len(found) != 1 or everywhere[(scope, template)] != len(configs):
            continue
        ((value, *unit),) = found
        if value == "[not read]":
            continue
        expect = _expectation(value)
        if expect is None:
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, tuple) else str(value)
        unit_text = f" {unit[0]}" if unit and unit[0] else ""
        rule: dict[str, Any] = {
            "severity": "warning",
            "title": f"{template} is not the site's {shown}{unit_text}",
            "applies_to": scope,
            "reading": template,
            "expect": expect,
            "gpu_models": [model],
            "why": f"All {node_count} nodes of the known-good fleet ({model}) had "
            f"{shown}{unit_text} here.",
            "fix": "Set it as on the rest of the fleet, or regenerate the baseline with "
            "`gpudiag baseline` if the fleet changed on purpose.",
        }
        if scope != "gpu" and scope != "node":
            rule["if_present"] = True
        rules.append(rule)
    return rules


def _metric_rules(
    fleet: Fleet, members: list[int], model: str, quantile: float, margin: float
) -> list[dict[str, Any]]:
    """A lower bound per kernel figure that is better higher."""
    figures: dict[str, list[float]] = defaultdict(list)
    nodes: dict[str, set[str]] = defaultdict(set)
    units: dict[str, str] = {}
    for i in members:
        run = fleet.current[i]
        for kv in run.kernel_values:
            scope_template = rule_template(kv.key)
            if not higher_is_better(kv.unit):
                continue
            figures[scope_template[1]].append(kv.value)
            nodes[scope_template[1]].add(run.host)
            units[scope_template[1]] = kv.unit
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
                "gpu_models": [model],
                "why": f"The {quantile:g} quantile of {len(values)} figures from "
                f"{len(nodes[template])} nodes of the known-good fleet ({model}) was "
                f"{at:.4g} {unit}; the bound is {1 - margin:.0%} of it.",
                "fix": "Find what differs from the fleet: `gpudiag fleet` with this node's "
                "snapshot among the fleet's says which configuration separates slow nodes.",
                **({"if_present": True} if scope not in ("gpu", "node") else {}),
            }
        )
    return rules


def write_rules(text: str, path: Path) -> None:
    """Write the rules file atomically."""

    def write(stream: IO[str]) -> None:
        stream.write(text)

    write_atomic(path, write)
