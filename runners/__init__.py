"""Host-side dispatch: `benchrun` starts `bench` ranks through a launcher (and, later, a container runtime)."""
