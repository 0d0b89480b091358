"""Who may spend what: virtual keys and teams (``auth``), spend budgets (``budgets``), prices and
cost arithmetic, the spend ledger and its database tables, and alert webhooks.
"""
