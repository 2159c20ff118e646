"""Time to accuracy's rules: when a run has converged or run out of budget (convergence.py), how the learning
rate scales with the batch (lr_rules.py), and the small CNN both frameworks build alike (smallcnn.py)."""
