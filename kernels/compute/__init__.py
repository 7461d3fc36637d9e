"""corral.kernels.compute: the model's compute kernels (docs/design.md section 8): products
x W^T with W in GGUF blocks dequantized in registers (float32, int8-VNNI and AMX activations),
attention over the KV cache, and the per-token layers (RMSNorm, RoPE, SwiGLU)."""
