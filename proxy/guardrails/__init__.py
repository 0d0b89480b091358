"""Guardrails: named policy checks on what goes in and comes out (the ``guardrails`` plugin's
room). :mod:`.config` the section's shapes, :mod:`.checks` the checks and their registry by
type, :mod:`.webhook` the operator's own service, :mod:`.moderation` a provider's moderation
endpoint, :mod:`.clients` their HTTP clients, :mod:`.texts` what a check reads, :mod:`.verdicts`
findings, verdicts and the block error, :mod:`.stream` the checks on a streamed answer,
:mod:`.selection` which checks a request runs, :mod:`.engine` running them."""
