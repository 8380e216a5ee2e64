#!/usr/bin/env bash
# Create .venv (if missing) and install cogra with everything it needs, offline-safe to re-run.
# Usage: scripts/setup.sh            -> runtime + Spark + tests + benchmarks (Flink's jars too) + the notebook's kernel
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.cogra-installed
# Reinstall only when the dependency list changed (keeps `make test` fast on a warm machine).
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[spark,test,bench,bench-flink,notebook]"
  echo "$want" > "$stamp"
fi
# The package's bytecode, as installing a wheel writes it: an editable install otherwise
# compiles each module's source in every fresh process where bytecode is not written
# (PYTHONDONTWRITEBYTECODE): ~0.1 s of `import cogra`, ~20 ms of a first call.
.venv/bin/python -m compileall -q -x '/_kernels/' python/cogra > /dev/null
# Compile the generic kernels and the common shapes' generated ones ahead of time once
# per kernel and generator source (3-5 minutes on two cores) into the bundle the package
# carries (python/cogra/_kernels, also what a wheel built from here ships), so that no
# query -- the demo's, a test's, a Spark worker's -- waits for them.
warm_stamp=.venv/.cogra-warm
warm_want=$( (echo "$want"; cat python/cogra/warmup.py; .venv/bin/python -c "from cogra.runtime.kernel_bundle import sources_hash; from cogra.runtime.compiled.codegen.kernel_cache import generator_version; print(sources_hash(), generator_version())") | sha256sum | cut -d' ' -f1)
if [ "${COGRA_WARM:-1}" != "0" ] && { [ ! -f "$warm_stamp" ] || [ "$(cat "$warm_stamp")" != "$warm_want" ] || [ ! -f python/cogra/_kernels/manifest.json ]; }; then
  .venv/bin/cogra warm --bundle && echo "$warm_want" > "$warm_stamp"
fi
# The class archive cogra.spark.session()'s driver JVM starts from (~40 s once per JDK,
# pyspark and shim jar; a no-op afterwards): a new session ~2 s sooner.  Without one,
# sessions start as plain Spark's do, so a failure here is a warning.
if [ "${COGRA_WARM:-1}" != "0" ]; then
  .venv/bin/cogra warm --spark > /dev/null || echo "setup: no class archive for the Spark driver (sessions start slower); see the error above" >&2
fi
