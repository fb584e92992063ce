"""Apache Otava's change point detector (E-Divisive means with a Student's t test, Fleming
et al., "Hunter: Using Change Point Detection to Hunt for Performance Regressions",
ICPE 2023), the files of apache-otava 0.8.0 (Apache License 2.0, as gpudiag) unchanged but
for their import lines: otava/analysis.py and otava/change_point_divisive/*.py, with
its NOTICE beside them.

Why a copy and not a dependency: apache-otava 0.8.0 pins numpy==2.2.0 and requires the
BigQuery, Postgres and Slack clients (35 packages with grpcio and cryptography), and
signal-processing-algorithms (MongoDB's) requires numpy<2 and gevent; neither installs
beside gpudiag's numpy. The one SciPy call (scipy.stats.ttest_ind_from_stats, Student's
two-sided test from means, standard deviations and counts) is gpudiag/stats.py's, checked
there against SciPy's published values. gpudiag/fleet/changes.py is what calls it.
"""
