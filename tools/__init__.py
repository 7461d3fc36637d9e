"""corral.tools."""
