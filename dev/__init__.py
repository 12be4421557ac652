"""Build scripts run by the Makefile (jar pruning, the --py-files zip)."""
