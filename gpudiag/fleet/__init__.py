"""The fleet: `gpudiag fleet` and `gpudiag baseline` over many snapshots (the commands
themselves are gpudiag/commands/fleet.py and baseline.py). Nothing is imported here: each
module is imported where it is used, so that `gpudiag --help` loads none of them (nor NumPy).

- records.py: what a loaded fleet is made of (Layout, NodeRun, KernelValue, LoadedFleet,
  the parsed kernel results), shared by both readers, which import it and not each other.
- load.py: reading snapshot files and folders into a LoadedFleet (`load_fleet`), with the
  fast path and worker processes; a *.parquet file named is read by parquet.py.
- parquet.py: a LoadedFleet in a Parquet file: `write_parquet` (--parquet FILE) and
  `read_parquet_fleet`.
- analysis.py: the statistics (configuration groups, outliers, why slow, history,
  findings) over the fleet's long numeric table, and the FleetReport they make
  (`analyse`). A new fleet statistic goes here.
- report.py: the FleetReport rendered as text, markdown or JSON.
- screen.py: the FleetReport on a Textual screen (`gpudiag fleet` in a terminal, without --format).
- baseline.py: a site rules file from a fleet known to be good (`gpudiag baseline`).

Imports inside the package: load -> records (and parquet, inside the function that reads
a *.parquet file); parquet -> records (and analysis, inside write_parquet); analysis ->
records; report -> analysis; screen -> analysis, report; baseline -> analysis, records.
"""
