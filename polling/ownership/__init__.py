"""Who owns which shard: lease statements with fencing epochs (``leases``), the
assignment by rendezvous hashing (``assignment``), poller registration and operator
moves (``registration``), a poller's lease keeper (``keeper``), renewal through a
slow batch (``renewer``) and how long a transaction may hold what others wait for
(``stall_bounds``). Imports ``common`` and the app's models, conf and metrics."""
