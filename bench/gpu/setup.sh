#!/usr/bin/env bash
# Install the carried wheels and gcdoctor on the lent H200 machine (no internet there).
# Usage (from the repo root, with .whl carried): source bench/gpu/setup.sh
set -e
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
mkdir -p /tmp/site
wheels=$(ls .whl/*.whl | grep -v -e plotly -e traceinsight -e pydot)
[ "${WITH_HTA:-0}" = 1 ] && wheels="$wheels $(ls .whl/plotly-*.whl .whl/traceinsight-*.whl .whl/pydot-*.whl)"
ms=""
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels $ms
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . >/dev/null
python3 - <<'PY'
import torch, transformers, deepspeed, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "deepspeed", deepspeed.__version__,
      "gpu", torch.cuda.get_device_name(0))
PY
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
set +e
