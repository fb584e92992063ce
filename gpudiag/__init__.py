"""gpudiag: bring up and diagnose GPU server nodes."""

__version__ = "0.1.0"
