"""The fleet: `gpudiag fleet` and `gpudiag baseline` over many snapshots (the commands
themselves are gpudiag/commands/fleet.py and baseline.py). Nothing is imported here: each
module is imported where it is used, so that `gpudiag --help` loads none of them (nor NumPy).

- records.py: what a loaded fleet is made of (Layout, NodeRun, KernelValue, LoadedFleet,
  the parsed kernel results), shared by both readers, which import it and not each other.
- load.py: reading snapshot files and folders into a LoadedFleet (`load_fleet`), with the
  fast path and worker processes; a *.parquet file named is read by parquet.py.
- parquet.py: a LoadedFleet in a Parquet file: `write_parquet` (--parquet FILE) and
  `read_parquet_fleet`.
- table.py: the fleet's latest runs (Fleet, each node's type) and its long numeric table
  (Columns, TableNames), and how readings and node sets are named (template, fold).
- outliers.py, whyslow.py, history.py: the questions asked of the table, one module each:
  what is odd (each kind of reading by its comparison: robust z, per position, counters
  by rate), why the slow ones are slow and which nodes are slow as nodes, what changed
  between runs of a node.
- changes.py: each node's history (History, from the same files and Parquet): change points
  of every kernel metric (Apache Otava's detector, copied in otava/), roll-outs by
  configuration change, the latest two runs against the fleet's drift (false discovery
  rate controlled), --compare's A/B verdicts (gpudiag/stats.py), the charts;
  factors.py: which configuration factor explains a metric's gaps (share of variance,
  effect per level, confounded factors); changes_text.py: all that as text and JSON.
- analysis.py: the FleetReport they make (`analyse`), its verdict and exit code, the
  configuration groups and the findings; it re-exports the public names of the others.
- judge.py: every node judged again with the site's rules (`gpudiag --rules DIR fleet`).
- report.py: the FleetReport rendered as text, markdown or JSON.
- screen.py: the FleetReport on a Textual screen (`gpudiag fleet` in a terminal, without --format).
- baseline.py: a site rules file from a fleet known to be good (`gpudiag baseline`).

Imports inside the package: load -> records (and parquet, inside the function that reads
a *.parquet file); parquet -> records (and analysis, inside write_parquet); table ->
records; outliers -> table; whyslow -> outliers, table; history -> records, table;
changes -> table, otava (inside change_points); factors -> changes, table; changes_text
-> changes, table; analysis -> changes, factors, history, outliers, records, table,
whyslow; report -> analysis, changes_text; screen -> analysis, changes_text, report;
baseline -> outliers, records, table, whyslow; judge -> records.
"""
