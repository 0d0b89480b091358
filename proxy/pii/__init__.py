"""PII and secret masking: detectors, the scanner, the vault of replacements, and restoring or
redacting them in whole and streamed replies.
"""
