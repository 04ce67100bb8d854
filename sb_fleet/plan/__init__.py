"""Layer 2, what will run where, as data: the plan, pattern rounds, fabric topology, the container command
sets, and the playbooks rendered from it. Pure: nothing here touches a host."""
