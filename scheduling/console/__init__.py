"""The jobs in the Django admin: the changelist with index-served search and filters
(``jobs``), estimated counts (``paginators``). Imports ``jobs``, ``sharding`` and the
base modules; ``scheduling.admin`` registers it."""
