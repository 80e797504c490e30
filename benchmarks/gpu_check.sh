#!/usr/bin/env bash
# benchmarks/gpu_check.py with its packages (benchmarks/README.md, "On a GPU").
#   benchmarks/gpu_check.sh --pack              here, with pip: the wheels the GPU machine lacks, into .whl/
#   benchmarks/gpu_check.sh --device cuda --out DIR [--quick] [--parts ...]
# The GPU machine's python3 (3.12) has torch, lightning, torchvision, torchmetrics, tensorboard and pytest,
# but not lightly, torchdata, jsonargparse (with docstring_parser, typeshed_client) or submitit: with a
# .whl/ folder beside this repository's root, they are installed into /tmp/site first (no network there).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(lightly==1.6.0 torchdata==0.11.0 jsonargparse==4.53.0 docstring_parser==0.18.0 typeshed_client==2.15.0 submitit==1.5.4)
if [[ "${1:-}" == "--pack" ]]; then
    rm -rf .whl && mkdir .whl
    "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
    du -ch .whl/*.whl | tail -1
    exit 0
fi
if [[ -d .whl ]] && ! "${PYTHON:-python3}" -c "import lightly, torchdata, jsonargparse" 2>/dev/null; then
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
