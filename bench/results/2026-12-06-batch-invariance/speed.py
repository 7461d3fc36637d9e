"""bench/model.py's corral_speeds for the default model on float32 activations over a
float32 KV cache (the default plan without AMX): prefill 256, decode b=1, 8, 32, 64.
Run from a worktree: .venv/bin/python /tmp/inv33/speed.py [label]"""

import runpy
import sys

label = sys.argv[1] if len(sys.argv) > 1 else ""
sys.argv = [sys.argv[0]]
ns = runpy.run_path("bench/model.py", run_name="bench_model")
import numba  # noqa: E402
import numpy as np  # noqa: E402
from corral.model import load_model, quant  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

numba.set_num_threads(2)
with threadpool_limits(limits=2, user_api="blas"):
    model = load_model(progress=False)
    model.kv_dtype = np.float32
    quant.INT8_ACTIVATIONS = False
    speeds = ns["corral_speeds"](model, [1, 8, 32, 64], 16, False)
print(label, " ".join(f"{k} {v:.1f}" for k, v in speeds.items()), flush=True)
