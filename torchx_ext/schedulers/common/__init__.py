"""What every scheduler backend shares: job/replica states, log queries, app ids, error files.

Standard library only (plus torchx where a module says so): the local supervisor and the
launcher import pieces of it and should start fast.
"""
