"""Where outcomes are written: each job's one fenced write (``writeback``), what a
delivered, failed or expired job becomes (``retries``), failed attempts
(``attempts``), and the sweep of rows written behind a checkpoint (``sweep``).
Imports ``common``, ``ownership`` and ``dispatch``."""
