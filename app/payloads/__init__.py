"""Payloads: the wire's encoding, the request and answer schemas, and what a captured
run becomes as the views' blocks, tables and exports."""
