"""Windows for the kernels: enumerating them over integer times, running many in blocks,
and sliding windows at about the cost of tumbling ones."""
