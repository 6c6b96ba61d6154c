"""Subcommands of ``tulip-nb`` (see :mod:`tulip_nb.cli`)."""
