"""The signal backfill: events built from extract rows (:mod:`~listsync.signals.columns`,
:mod:`~listsync.signals.build`), sent at each signal's rate limit (:mod:`~listsync.signals.sender`),
with checkpoints that let a retry resume (:mod:`~listsync.signals.checkpoints`), run end to end by
:func:`~listsync.signals.ingest.ingest_events`."""
