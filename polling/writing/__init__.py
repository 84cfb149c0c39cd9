"""Where outcomes are written: each job's one fenced write (``writeback``), what a
delivered, failed or expired job becomes (``retries``), failed attempts
(``attempts``), callbacks and kept responses (``callbacks``), topic jobs fanned out
(``fanout``) and their endpoints' health (``endpoint_health``), and the sweep of rows
written behind a checkpoint (``sweep``). Imports ``common``, ``ownership`` and
``dispatch``."""
