"""Who is calling: virtual keys, teams and their limits, resolved into a principal.

``tokens`` mints, hashes and reads keys; ``config`` is the ``database:`` / ``auth:`` sections;
``records`` the key and team records the admin API and the CLI show; ``registry`` creates,
changes and lists them; ``authenticator`` turns a request's key into a
:class:`~proxy.core.canonical.Principal` from an in-process cache of key hashes.
"""
