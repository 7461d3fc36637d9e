"""corral.integrations: corral inside other engines (docs/design.md section 4's masks, section 7's
Batch job). Each adapter is its own module, imported by name, so that its engine (an optional
extra) is imported only by those who use it:

- `corral.integrations.rows`: the framework-free core: one `Constraint` per row of token ids,
  keyed by the generated ids (beams and reordered rows), EOS and the budget rule.
- `corral.integrations.huggingface`: a `transformers` `LogitsProcessor` (`corral[transformers]`).
- `corral.integrations.llamacpp`: a llama-cpp-python `logits_processor` (`corral[llamacpp]`).
- `corral.integrations.ray_batch`: the Batch job on Ray Data actors (`corral[ray]`).

Imports flow one way: this package sits above `corral.tools`, and nothing below imports it.
"""
