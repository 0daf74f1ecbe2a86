"""Per-query math as plain numpy/pandas functions, and the thin Spark wrappers that apply them."""
