#!/usr/bin/env bash
# Download, here (where PyPI is reachable), what the lent H200 machine lacks for the README's
# set-up command: the wheels (Python 3.12, manylinux x86-64) and DeepSpeed's sdist, into .whl/.
# Usage, from the repo root: bash bench/gpu/wave3_platform_wheels.sh   (then carry .whl)
set -euo pipefail
# .whl/ is ignored by the repo's .gitignore
mkdir -p .whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .whl \
  msgspec==0.23.0 textual==8.2.8 platformdirs mdit-py-plugins linkify-it-py uc-micro-py \
  hjson pydantic pydantic-core annotated-types typing-inspection setuptools wheel
python3 -m pip download -q --no-deps --no-binary=:all: -d .whl deepspeed==0.19.8  # sdist only on PyPI
ls -la .whl; du -sh .whl
