"""The rack view of a fleet: the trays of each NVLink domain (an NVL72 rack: 18 trays of
four GPUs) found by the cluster UUID NVML gives their GPUs (gpu.N.fabric.cluster_uuid),
and per rack whether every tray sees the same cluster and the rack's clique, how many
GPUs are in the fabric and how many NVLinks are up, and which tray disagrees and how:

    tray gb-r07-t12: cliqueId 0x7ffe differs from the rack's 0x7ffd; GPU 2: 16 of 18 links

The rack's clique is the one most of its GPUs report; its link count per GPU the most any
of its GPUs has. A tray is named only for what differs from its own rack. Nodes whose GPUs
report no cluster (all-zero UUID, no fabric, or a snapshot older than the reading) are in
no rack.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ClusterShell.NodeSet import NodeSet

from gpudiag.hostfs import natural_key

NO_CLUSTER = "00000000-0000-0000-0000-000000000000"
FIELDS = {
    "fabric.cluster_uuid": "cluster",
    "fabric.clique_id": "clique",
    "fabric.state": "state",
    "nvlink.active": "active",
    "nvlink.count": "count",
}
_KEY = re.compile(r"gpu\.(\d+)\.(" + "|".join(re.escape(k) for k in FIELDS) + r")")


# A rack's identity: every tray of one NVLink domain shares it and the next rack's differs,
# so nodes differing in these alone are not odd as configuration (the rack view judges them)
_DOMAIN_IDENTITY = re.compile(r"gpu\.\d+\.fabric\.(?:cluster_uuid|clique_id|cliques)")


def rack_identity_only(differences: list[tuple[str, str, str]]) -> bool:
    """Whether a configuration group differs from its model's largest group only in the
    NVLink domain it belongs to (another rack's cluster UUID and clique)."""
    return bool(differences) and all(_DOMAIN_IDENTITY.fullmatch(k) for k, _, _ in differences)


_FOLDABLE = re.compile(r"^[A-Za-z0-9._-]+$")


def fold(names: list[str]) -> str:
    """Tray names folded as ClusterShell folds them (gpudiag.fleet.analysis.fold's way)."""
    if all(_FOLDABLE.match(name) for name in names):
        return str(NodeSet.fromlist(names))
    return ",".join(sorted(names, key=natural_key))


@dataclass
class Tray:
    """One node's GPUs as the fabric sees them: gpu index -> field -> value."""

    host: str
    gpus: dict[int, dict[str, Any]]

    def cluster(self) -> str:
        """The cluster most of its GPUs report."""
        found = Counter(g.get("cluster") for g in self.gpus.values() if g.get("cluster"))
        return found.most_common(1)[0][0] if found else ""


@dataclass
class Rack:
    """One NVLink domain: its trays, what it agrees on, and each tray that differs."""

    cluster: str
    trays: list[str]
    clique: int | None
    links_per_gpu: int
    gpus: int
    gpus_in: int
    links: int
    links_up: int
    disagree: dict[str, list[str]] = field(default_factory=dict)  # tray -> how


def _trays(fleet: Any) -> list[Tray]:
    """Every current node of a gpudiag.fleet.analysis.Fleet with fabric readings, as a
    tray. A tray's GPUs depend on its configuration only (its layout's and values), so
    they are read once a configuration (alike nodes share one: 3 for 1,000 nodes), and
    each tray gets its own copy."""
    wanted: dict[int, list[tuple[int, str, str]]] = {}
    by_config: dict[int, dict[int, dict[str, Any]]] = {}
    trays = []
    for run in fleet.current:
        known = by_config.get(run.config)
        if known is None:
            if run.layout not in wanted:
                keys = fleet.loaded.layouts[run.layout].keys
                wanted[run.layout] = [
                    (int(m.group(1)), FIELDS[m.group(2)], key)
                    for key in keys
                    if (m := _KEY.fullmatch(key))
                ]
            gpus: dict[int, dict[str, Any]] = defaultdict(dict)
            for gpu, name, key in wanted[run.layout]:
                found = fleet.config_value(run.config, key)
                if found is not None and found[2] == "ok":
                    gpus[gpu][name] = found[0]
            known = by_config[run.config] = dict(gpus)
        tray = Tray(run.host, {gpu: dict(fields) for gpu, fields in known.items()})
        if tray.cluster() not in ("", NO_CLUSTER):
            trays.append(tray)
    return trays


def _clique(value: Any) -> str:
    return f"0x{int(value):x}" if isinstance(value, int) else str(value)


def _rack(cluster: str, trays: list[Tray]) -> Rack:
    """One rack's agreement and each tray's difference from it."""
    gpus = [g for t in trays for g in t.gpus.values()]
    cliques = Counter(g["clique"] for g in gpus if "clique" in g)
    clique = cliques.most_common(1)[0][0] if cliques else None
    per_gpu = max((int(g.get("count", 0)) for g in gpus), default=0)
    rack = Rack(
        cluster=cluster,
        trays=sorted((t.host for t in trays), key=natural_key),
        clique=clique,
        links_per_gpu=per_gpu,
        gpus=len(gpus),
        gpus_in=sum(1 for g in gpus if g.get("state") == "completed"),
        links=per_gpu * len(gpus),
        links_up=sum(int(g.get("active", 0)) for g in gpus),
    )
    for tray in sorted(trays, key=lambda t: natural_key(t.host)):
        how = []
        others = sorted({str(g.get("cluster")) for g in tray.gpus.values()} - {cluster})
        if others:
            how.append(f"cluster {', '.join(others)} differs from the rack's {cluster}")
        odd = sorted({g["clique"] for g in tray.gpus.values() if g.get("clique") != clique})
        if odd and clique is not None:
            seen = ", ".join(_clique(c) for c in odd)
            how.append(f"cliqueId {seen} differs from the rack's {_clique(clique)}")
        out = [i for i, g in sorted(tray.gpus.items()) if g.get("state") != "completed"]
        if out:
            states = ", ".join(f"GPU {i} {tray.gpus[i].get('state', 'unknown')}" for i in out)
            how.append(f"not in the fabric: {states}")
        for index, gpu in sorted(tray.gpus.items()):
            active = int(gpu.get("active", per_gpu))
            if active < per_gpu:
                how.append(f"GPU {index}: {active} of {per_gpu} links")
        if how:
            rack.disagree[tray.host] = how
    return rack


def rack_view(fleet: Any) -> list[Rack]:
    """The fleet's racks (NVLink domains by cluster UUID), largest first."""
    by_cluster: dict[str, list[Tray]] = defaultdict(list)
    for tray in _trays(fleet):
        by_cluster[tray.cluster()].append(tray)
    racks = [_rack(cluster, trays) for cluster, trays in by_cluster.items()]
    return sorted(racks, key=lambda r: (-len(r.trays), r.cluster))


def rack_lines(racks: list[Rack], markdown: bool = False) -> list[str]:
    """The racks section's lines (none when the fleet has no NVLink domain)."""
    if not racks:
        return []
    bullet, sub = ("- ", "  - ") if markdown else ("  ", "      ")
    lines = ["\n## Racks\n" if markdown else "\nRacks"]
    for rack in racks:
        clique = "no clique" if rack.clique is None else f"clique {_clique(rack.clique)}"
        verdict = (
            f"{len(rack.disagree)} tray{'s' if len(rack.disagree) != 1 else ''} disagree"
            if rack.disagree
            else "every tray agrees"
        )
        lines.append(
            f"{bullet}rack {rack.cluster}: {len(rack.trays)} trays ({fold(rack.trays)}), "
            f"{clique}, {rack.gpus_in} of {rack.gpus} GPUs in the fabric, "
            f"{rack.links_up} of {rack.links} NVLinks up; {verdict}"
        )
        for tray, how in rack.disagree.items():
            lines.append(f"{sub}tray {tray}: {'; '.join(how)}")
    return lines


def racks_json(racks: list[Rack]) -> list[dict[str, Any]]:
    """The racks as plain data."""
    return [
        {
            "cluster": r.cluster,
            "trays": r.trays,
            "clique": r.clique,
            "gpus": r.gpus,
            "gpus_in": r.gpus_in,
            "links": r.links,
            "links_up": r.links_up,
            "disagree": r.disagree,
        }
        for r in racks
    ]
