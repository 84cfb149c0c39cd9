"""Flow control at the read (``scheduling.flow`` holds the limits): which keyed jobs
of a read may go now, with rate and parallelism slots (``admission``), and the keys
a poller holds back until they may go again (``gate``). Imports ``common`` and
``dispatch`` (the job type)."""
