"""corral.integrations: corral's masks inside other engines (docs/design.md section 4; usage:
docs/integrations.md). Each adapter is its own module, imported by name, so that its engine (an
optional extra) is imported only by those who use it:

- `corral.integrations.rows`: the framework-free core: one `Constraint` per row of token ids.
- `corral.integrations.huggingface`: a `transformers` `LogitsProcessor` (`corral[transformers]`).
- `corral.integrations.llamacpp`: a llama-cpp-python `logits_processor` (`corral[llamacpp]`).

The adapters import `automata`, `kernels` and `model`; nothing in corral imports them.
"""
