"""``manage.py`` commands of the pollers (``runpoller``, ``runservice``, ``lag``, moves,
reshard) and the demo's webhook receiver; the top layer, may import anything."""
