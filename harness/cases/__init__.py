"""Stage 1, the problem: the Case (one JSON-serialisable packed batch with its layout), its hidden-state
variant, the Hypothesis strategies that draw Cases, the case limits a target may impose, and the policy-loss
inputs a Case implies. Nothing here runs on a rank or judges a result."""
