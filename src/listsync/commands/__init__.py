"""Subcommands of the ``listsync`` command line, one module each (see ``listsync.cli``)."""
