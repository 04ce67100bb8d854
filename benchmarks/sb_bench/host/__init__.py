"""What runs a step on a host: the runner, mpi launch, mode specs, host preparation and the monitor."""
