"""peanut-py: a portable OpenCL read mapper after PEANUT (Köster & Rahmann)."""
from ._version import __version__

__all__ = ["__version__"]
