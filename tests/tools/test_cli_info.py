"""`corral info`: the CPU features found, the plan a fresh `load_model()` chooses (the same as
`ComputePlan.detect()`), and the thread settings as the process has them."""

from __future__ import annotations

from corral.kernels.compute.plan import ComputePlan, cpu_features
from corral.tools.cli import INFO_FEATURES, main


def test_info_prints_the_features_the_plan_and_the_thread_variables(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    features = cpu_features()
    assert " ".join(f"{'+' if f in features else '-'}{f}" for f in INFO_FEATURES) in out
    plan = ComputePlan.detect()
    for name, value in vars(plan).items():
        assert f"  {name}: {value}\n" in out
    assert "OPENBLAS_THREAD_TIMEOUT=" in out and "OMP_WAIT_POLICY=" in out
