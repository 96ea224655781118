"""Evaluating a policy: the headline eval (headline.py), the sampled one (sampled.py), and
`evaluate_set` with its row builder (on_set.py), which a run and `grpoctl eval` share."""
