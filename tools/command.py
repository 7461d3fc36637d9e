"""The `corral` console script: the process settings first (`corral.kernels.threads.configure`,
before NumPy and Numba load), then the command line (`corral.tools.cli.main`)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `corral` console script; `corral.tools.cli.main`'s exit status."""
    from corral.kernels.threads import configure

    configure()
    from corral.tools.cli import main as cli_main  # NumPy and Numba load here, configured

    return cli_main(argv)
