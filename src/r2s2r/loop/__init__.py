"""The closed loop: failures found in the twin become training data and better policies
(`r2s2r improve`, against a control arm that spends the same data blindly)."""
