"""The package's version, in one place (the user agent, a worker's
announcement and ``tether_client.__version__`` read it)."""

VERSION = "0.1.0"
