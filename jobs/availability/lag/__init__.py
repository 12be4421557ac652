"""Consumer-group lag after Burrow: offset commits from `__consumer_offsets`, head offsets
sampled every second, and the evaluator rules (pure) that turn both into group statuses."""
