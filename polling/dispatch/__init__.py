"""Where due jobs are sent: the sink interface and the job handed to it (``base``),
routing by target kind (``router``), webhooks over libcurl in a transport process
(``webhook``, ``transport``, ``curlloop``, ``hostguard``, ``signing``), in-process
handlers (``handlers``). Imports ``common`` and ``ownership`` (dispatch progress)."""
