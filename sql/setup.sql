-- Tables for q1.sql-q3.sql (and transport for benchmarks), over Parquet directories
-- made by cogra.datasets:
--
--   python -m cogra.datasets /abs/path/data [N_EVENTS]   # writes data/<name>/part-00000.parquet
--   spark-sql -d COGRA_DATA=/abs/path/data -f sql/setup.sql
--
-- ${COGRA_DATA} is Spark SQL variable substitution (spark.sql.variable.substitute,
-- on by default): the spark-sql -d / --define / --hivevar NAME=VALUE defines it, and so
-- does spark.conf.set("COGRA_DATA", ...) before spark.sql(...) in a program.
-- ${env:COGRA_DATA} would read the environment variable instead.  Use an absolute path.
-- The tables are external and persist in the catalog of the session (metastore_db/ in the
-- working directory for the CLI); IF NOT EXISTS keeps an old LOCATION, so DROP TABLE
-- first to point a table at new data.

CREATE TABLE IF NOT EXISTS activity  USING parquet LOCATION '${COGRA_DATA}/activity';
CREATE TABLE IF NOT EXISTS rides     USING parquet LOCATION '${COGRA_DATA}/rides';
CREATE TABLE IF NOT EXISTS stock     USING parquet LOCATION '${COGRA_DATA}/stock';
CREATE TABLE IF NOT EXISTS transport USING parquet LOCATION '${COGRA_DATA}/transport';
