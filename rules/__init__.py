"""The shipped rule files (installed as package data of `gpudiag.rules`)."""
