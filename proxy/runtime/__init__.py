"""One configuration, live: the YAML document parsed and checked, the plugin chain loaded, and
the snapshot of parts that serves it, swapped whole on reload (a weaker config refused).
"""
