"""Spend budgets per key, team and end user: live counters in the state store, what a
reservation is made of, the counters kept true to the ledger, and the soft-limit alert.
"""
