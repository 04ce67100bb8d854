"""Layer 7, the I/O edge: the one executor (ansible-runner), SSH options and the per-host fetch, the
stages (deploy, image, run, collect, cleanup), pattern follow-ups and the validate workflow."""
