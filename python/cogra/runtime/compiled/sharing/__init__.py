"""One kept variable's totals, computed once and read by every sub-stream that holds its
events."""
