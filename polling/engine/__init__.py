"""The loop that ties the parts: the poller (``poller``), its window of deliveries in
flight (``pipeline``) and what moves that window between reads (``pump``). Imports
every lower package; only ``console`` and ``management`` import it."""
