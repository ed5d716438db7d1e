"""faden-agent: the host-side execution bridge for Fadenstack GPU node clusters."""

__version__ = "0.1.0"
