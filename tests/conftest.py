"""Shared test set-up: one BLAS thread (as the CLI and Makefile do) before numpy is imported."""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
