"""Multi-process runs: who am I (world), how ranks meet (rendezvous), TF cluster specs."""
