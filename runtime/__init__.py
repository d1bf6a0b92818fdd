"""The process runtime: starts and stops the Ray and Spark (RayDP) processes a run uses.

- `runtime.ray_spark`: connect to a Ray cluster (address and token checks) or start an
  embedded, loopback-only one; start and stop Spark on it through RayDP, watch its
  executors, keep its JVMs at a low priority; `session()` for both.
- `runtime.jvm_archive`: class-data-sharing archives that make Spark's JVMs start faster.

The engine (`emulator/`) imports nothing from here: it only needs a running Ray, whoever
started it. Import the modules themselves (`from runtime.ray_spark import start_ray`):
nothing is re-exported here, so a test that patches a name in `runtime.ray_spark` patches
it for every caller.
"""
