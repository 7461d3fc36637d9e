"""corral.model."""
