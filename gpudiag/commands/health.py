"""`gpudiag health`: the quick, safe check, in the convention of the engine that runs it
(the check, its verdict and each convention's words: gpudiag/health.py)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from typing import Any

from gpudiag import health, inputs
from gpudiag.commands.common import UsageError, live_node, write_prometheus


def add_parser(subparsers: Any) -> None:
    """`gpudiag health`."""
    parser = subparsers.add_parser("health")
    parser.add_argument(
        "--for",
        dest="convention",
        choices=health.CONVENTIONS,
        default="nagios",
        help="whose convention to speak (default nagios)",
    )
    parser.add_argument(
        "--timeout",
        type=inputs.number_option(0, health.TIMEOUT_MAX, above=True),
        default=health.DEFAULT_TIMEOUT,
        metavar="S",
        help=f"give up after S seconds with an UNKNOWN verdict"
        f" (default {health.DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--kernels",
        choices=("quick",),
        default=argparse.SUPPRESS,
        help="also run the quick kernels (seconds on a GPU node, about a minute on a"
        " small CPU-only machine: raise --timeout there)",
    )
    parser.add_argument(
        "--drain-on",
        default=",".join(a.value for a in health.DEFAULT_DRAIN_ON),
        metavar="ACTIONS",
        help="--for slurm: drain for a critical finding recommending one of these"
        " (comma-separated; default drain,service)",
    )
    parser.add_argument(
        "--node", metavar="NAME", help="--for slurm: the node (default $SLURMD_NODENAME)"
    )
    parser.add_argument("--scontrol", metavar="PATH", help="--for slurm: scontrol to use")
    parser.add_argument("--slurm-conf", metavar="FILE", help="--for slurm: SLURM_CONF for scontrol")


def run(args: argparse.Namespace) -> int:
    """`gpudiag health`: check the node and report in the convention asked for."""
    started = time.monotonic()
    kernels = getattr(args, "kernels", None)
    try:
        if kernels not in (None, "quick"):
            raise health.HealthError("health runs the quick kernels only (--kernels quick)")
        if kernels and (args.root != "/" or args.nvml_replay):
            raise health.HealthError(
                "--kernels measures this machine: not with --root or --nvml-replay"
            )
        drain_on = health.parse_actions(args.drain_on)
        cluster = None
        timeout = args.timeout
        if args.convention == "slurm":
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **os.environ}
            if args.slurm_conf:
                env["SLURM_CONF"] = args.slurm_conf
            import socket

            node = args.node or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
            if not health.NODE_NAME.fullmatch(node):
                raise health.HealthError(
                    f"node name {node[:80]!r}: one Slurm node name is expected"
                    " (letters, digits, '.', '_', '-'; no list or range)"
                )
            deadline = started + health.SLURM_BUDGET_S
            cluster = health.Slurm(node, health.find_scontrol(args.scontrol), env, deadline)
            # the probes' share (45 s): scontrol gets the rest, whatever setting up took
            timeout = min(timeout, health.SLURM_BUDGET_S - health.SCONTROL_RESERVE_S)
        live = live_node(args)
        if cluster is not None:
            # the GPUs Slurm configures for the node, judged as a reading (NODE001, NODE002)
            expected = cluster.expected_gpus()
            if expected is not None:
                live = replace(live, extra=(*live.extra, expected))
        verdict = None
        try:
            verdict = health.check_node(live, timeout, kernels)
        finally:
            if verdict is None or not verdict.timed_out:
                live.nvml.close()  # else the worker may still be inside NVML: exit frees it
        if args.prometheus and verdict.snapshot is not None:
            write_prometheus(verdict.snapshot, args.prometheus)
        if cluster is not None:
            text, code = health.slurm(verdict, cluster, drain_on)
        else:
            convention = {"nagios": health.nagios, "npd": health.npd, "json": health.as_json}
            text, code = convention[args.convention](verdict)
    except health.HealthError as exc:
        raise UsageError(str(exc)) from None
    sys.stdout.write(text)
    sys.stdout.flush()
    return code
