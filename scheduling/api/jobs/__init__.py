"""The jobs API: one-shot jobs created, read, listed, cancelled and rescheduled
(``views``, ``serializers``), the bulk endpoint's direct paths (``bulkplain``) and the
single-job create and read without DRF's per-request machinery (``fastpath``)."""
