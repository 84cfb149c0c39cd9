"""Who may call the API and how often: team API keys (``auth``), per-team request
budgets (``throttling``) counted one atomic operation a request (``ratelimit``)."""
