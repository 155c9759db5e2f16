#!/usr/bin/env bash
# GPU checks for the trainer (issue 5): bf16 autocast on CUDA, resume on CUDA, CPU load of a
# GPU-trained checkpoint, and the speed of one shipped preset.  Run from the repository root on a
# machine with one CUDA GPU; takes about 2 minutes.
set -euo pipefail
python -m pytest -q tests/train/test_train.py -m gpu -p no:cacheprovider
python scripts/train_shipped.py numerals_t5 --steps 300 --no-export --runs /tmp/zoo_gpu_runs --no-progress
