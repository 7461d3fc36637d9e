"""`ComputePlan`: how a model's products and attention run, one frozen value chosen once from the
CPU's features and the user's options (`ComputePlan.detect`, called by `load_model`), or built
directly (tests, benchmarks). docs/numerics.md gives the reasons for each default.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

ACTIVATIONS = ("float32", "int8-vnni", "int8-amx")
"""The activation formats of the block products: x in float32 (`kernels.compute.quant`,
`quant_rows`), x quantized by blocks to int8 on AVX-512 VNNI (`quant_int8`) or on AMX tiles
(`quant_amx`)."""

KV_DTYPES = ("float32", "float16")
"""The KV cache's storage dtypes."""

LANES = (16, 8)
"""The float-activation kernels' vector widths (`quant_rows.WIDTHS`): 16 (AVX-512), 8 (AVX2)."""


@functools.cache
def cpu_features() -> frozenset[str]:
    """The host CPU's features as LLVM names them ("avx2", "avx512f", "avx512vnni", "amx-int8",
    "f16c", ...), read once through llvmlite; empty when they cannot be read."""
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        flags = llvm.get_host_cpu_features()
    except Exception:  # noqa: BLE001 - unreadable: no optional kernel is chosen
        return frozenset()
    return frozenset(name for name, on in flags.items() if on)


@dataclass(frozen=True)
class ComputePlan:
    """How a model's matrix products and attention run (docs/numerics.md, "The plan").

    Attributes:
        activations: one of `ACTIVATIONS`, the block products' activation format: "float32"
            (`quant.TiledMatrix.matmul` on x in float32), "int8-vnni" (x quantized by blocks
            to int8, AVX-512 VNNI), "int8-amx" (int8 on AMX tiles).
        lanes: 16 or 8 (`LANES`), the vector width of the float-activation kernels of several
            rows (`quant_rows`); the results are the same bit for bit in either.
        batch_invariant: whether passes of every size take the blocks' kernels (not only those
            of at most `quant.QUANTIZED_MAX_ROWS` rows), so that a token's logits are the same bit
            for bit however its passes are made up.
        positional_attention: whether every prefill pass is attended by the ragged kernel in
            short pieces (`llama.plan_prefill`), in an order a token's position alone fixes.
        kv_dtype: one of `KV_DTYPES`, the KV cache's storage (`Model.new_cache`).
        one_row_q4_1_in_registers: whether one row of x times a Q4_1 matrix goes to
            `quant_rows` (sums in registers) rather than to the one-row streaming kernels of
            `kernels.compute.quant` (the same sums bit for bit).

    Raises:
        ValueError: a field outside its choices.
    """

    activations: str = "float32"
    lanes: int = 16
    batch_invariant: bool = True
    positional_attention: bool = True
    kv_dtype: str = "float32"
    one_row_q4_1_in_registers: bool = False

    def __post_init__(self):
        choices = {"activations": ACTIVATIONS, "lanes": LANES, "kv_dtype": KV_DTYPES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"ComputePlan.{name} must be one of {allowed}, got "
                                 f"{getattr(self, name)!r}")  # fmt: skip
        for name in ("batch_invariant", "positional_attention", "one_row_q4_1_in_registers"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ComputePlan.{name} must be True or False")

    @property
    def needs(self) -> frozenset[str]:
        """The CPU features (LLVM's names) its kernels need (8-lane float32 kernels: none, plain
        LLVM vector code)."""
        needs = set()
        if self.lanes == 16 or self.activations != "float32":
            needs.add("avx512f")
        if self.activations == "int8-vnni":
            needs |= {"avx512bw", "avx512vnni"}
        if self.activations == "int8-amx":
            needs |= {"amx-tile", "amx-int8"}
        return frozenset(needs)

    @property
    def every_pass(self) -> bool:
        """Whether passes of every size take the blocks (`llama.linear`, `llama.lm_head`): on
        AMX (whose kernels serve prompts as well) or under `batch_invariant`."""
        return self.activations == "int8-amx" or self.batch_invariant

    def missing(self, features: frozenset[str] | None = None) -> str | None:
        """Why this plan cannot run on a CPU with `features` (default: this host's, and for
        "int8-amx" Linux's permission to use the tiles), in one line; None when it can."""
        host = features is None
        lacking = sorted(self.needs - (cpu_features() if host else features))
        if lacking:
            return f"the CPU lacks {', '.join(lacking)}"
        if self.kv_dtype == "float16" and host:
            from corral.kernels.compute.attention import float16_supported

            if not float16_supported():
                return "Numba's target CPU converts no float16 in registers (x86: F16C)"
        if self.activations == "int8-amx" and host:
            from corral.kernels.compute import quant_amx

            if not quant_amx.available():
                return "Linux refused AMX's tile state, or the AMX kernels do not compile here"
        if self.activations == "int8-vnni" and host:
            from corral.kernels.compute import quant_int8

            if not quant_int8.available():
                return "the VNNI kernels do not compile here"
        return None

    @staticmethod
    def detect(
        int8_activations: bool | None = None,
        batch_invariant: bool = True,
        kv_dtype: str | None = None,
        quantized: bool = True,
        features: frozenset[str] | None = None,
    ) -> ComputePlan:
        """The plan for this host (or a CPU with `features`), as `load_model` chooses it.

        Args:
            int8_activations: None or True (int8 on AMX where it runs, else on AVX-512 VNNI
                where it runs, else float32; docs/numerics.md, "int8 activations on VNNI")
                or False (float32).
            batch_invariant: see `ComputePlan.batch_invariant`.
            kv_dtype: None (float16 where int8 activations serve quantized weights and
                every pass reads the blocks, the same bit for bit however the passes are made
                up: on AMX, or under `batch_invariant`; else float32), "float16" or "float32".
            quantized: whether the model reads quantization blocks (`load_model(weights=)`).
            features: LLVM feature names; None for this host's (`cpu_features()`), whose AMX
                and VNNI kernels must also compile and check (`quant_amx.available()`, which
                asks Linux for the tile state, and `quant_int8.available()`).

        Raises:
            ValueError: an option outside its choices.
        """
        if int8_activations is not None and not isinstance(int8_activations, bool):
            raise ValueError(f"int8_activations must be None, True or False, got "
                             f"{int8_activations!r}")  # fmt: skip
        host = features is None
        features = cpu_features() if host else frozenset(features)

        def runs(plan: ComputePlan) -> bool:
            return plan.missing(None if host else features) is None

        lanes = 16 if "avx512f" in features else 8
        activations = "float32"
        if int8_activations is not False and runs(ComputePlan("int8-amx", 16)):
            activations = "int8-amx"
        elif int8_activations is not False and runs(ComputePlan("int8-vnni", 16)):
            activations = "int8-vnni"
        every_pass = activations == "int8-amx" or batch_invariant
        if kv_dtype is None:
            half = ComputePlan(activations, lanes, kv_dtype="float16")
            int8 = activations != "float32"
            kv_dtype = "float16" if quantized and int8 and every_pass and runs(half) else "float32"
        return ComputePlan(
            activations=activations,
            lanes=lanes,
            batch_invariant=batch_invariant,
            positional_attention=every_pass,
            kv_dtype=kv_dtype,
            one_row_q4_1_in_registers=lanes == 8,
        )
