"""Analytics: the log as Parquet, DuckDB views, reports, the doctor and `blackbox sql`."""
