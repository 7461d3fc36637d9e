"""corral.kernels."""
